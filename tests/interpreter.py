"""What the modules that run the fused kernels in Triton's interpreter share.

Each sets ``TRITON_INTERPRET=1`` before anything in its process imports
Triton, then calls :func:`skip_without_triton` and imports
:func:`triton_interprets`, an autouse fixture that fails every test when
Triton was imported in compiling mode first.
"""
import pytest

from attnlib import fused


def skip_without_triton() -> None:
    if not fused.triton_installed():
        pytest.skip("Triton is not installed", allow_module_level=True)


@pytest.fixture(autouse=True)
def triton_interprets(request):
    assert fused.triton_interprets(), (
        "Triton was imported in compiling mode before this module set TRITON_INTERPRET=1; "
        f"run `pytest tests/{request.path.name}` in a process of its own"
    )
