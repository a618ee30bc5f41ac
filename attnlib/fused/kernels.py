"""Loading the Triton kernels in the mode Triton runs in, and showing their source.

The kernels live in the modules ``*_kernel.py`` of this package, which
import Triton; nothing else in ``attnlib`` does until a kernel is needed.
"""
from __future__ import annotations

import ast
import importlib
import os
import pathlib
import sys

from .support import triton_interprets, triton_version

#: The modules that hold kernels, in the order their source is searched.
KERNEL_MODULES = ("forward_kernel", "decode_kernel", "backward_kernel")

def _let_the_interpreter_take_scalar_loop_bounds() -> None:
    """Make Triton < 3.8's interpreter run ``range(start, end, step)`` over scalars with NumPy >= 2.4.

    The interpreter holds a scalar as a NumPy array of shape (1,), and
    before Triton 3.8 it turns a loop bound into an index with ``int()`` on
    that array, which NumPy 2.4 refuses ("only 0-dimensional arrays can be
    converted to Python scalars"). Triton 3.8 squeezes the array first; this
    gives older interpreters the same ``__index__``. It only changes how the
    interpreter converts a scalar, never what a compiled kernel does.
    """
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor
    if getattr(patch_tensor, "squeezes_loop_bounds", False):
        return

    def index(self):
        return int(self.handle.data.squeeze())

    def patch_tensor_squeezing(tensor, *scope):
        patch_tensor(tensor, *scope)
        if scope:  # from Triton 3.6 on, the patches go through a scope that undoes them after a launch
            scope[0].set_attr(tensor, "__index__", index)
        else:
            tensor.__index__ = index

    patch_tensor_squeezing.squeezes_loop_bounds = True
    interpreter._patch_lang_tensor = patch_tensor_squeezing


def kernel_source(name: str) -> str:
    """The source of kernel function ``name``, decorator included, from this package's kernel modules.

    Read from the files, so that it is shown where Triton is not installed.
    """
    for module in KERNEL_MODULES:
        path = pathlib.Path(__file__).with_name(f"{module}.py")
        if not path.exists():
            continue
        text = path.read_text()
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                return "\n".join(text.splitlines()[first - 1:node.end_lineno]) + "\n"
    files = ", ".join(f"{m}.py" for m in KERNEL_MODULES)
    raise ValueError(f"name must be a function of attnlib/fused/ ({files}), got {name!r}")


def kernel_module(name: str = "forward_kernel"):
    """The kernel module ``attnlib.fused.<name>``, imported in the mode Triton runs in.

    ``@triton.jit`` reads ``TRITON_INTERPRET`` when it decorates, so the
    variable is set, for the import only, to the mode Triton's own library
    was imported in (see :mod:`attnlib.fused.support`).
    """
    if name not in KERNEL_MODULES:
        raise ValueError(f"name must be one of {KERNEL_MODULES}, got {name!r}")
    qualified = f"{__package__}.{name}"
    if qualified not in sys.modules:
        interprets = triton_interprets()
        if interprets and triton_version() < (3, 8):
            _let_the_interpreter_take_scalar_loop_bounds()
        saved = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1" if interprets else "0"
        try:
            importlib.import_module(qualified)
        finally:
            if saved is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = saved
    return sys.modules[qualified]
