"""The fused path: attnlib's Triton kernels (FlashAttention-2) behind the contract.

Its parts, one module each:

- :mod:`~attnlib.fused.forward_kernel`, :mod:`~attnlib.fused.decode_kernel`,
  :mod:`~attnlib.fused.backward_kernel`: the Triton kernels of the forward
  pass, of split-key decoding and of the backward pass;
- :mod:`~attnlib.fused.support`: what the kernels can take, and whether
  Triton compiles or interprets in this process;
- :mod:`~attnlib.fused.kernels`: importing the kernels in that mode, and
  their source for the book;
- :mod:`~attnlib.fused.layout`: the caller's tensors laid out as kernel
  arguments; :mod:`~attnlib.fused.tiles`: tile sizes and the autotuner;
- :mod:`~attnlib.fused.forward`, :mod:`~attnlib.fused.decode`: the launches
  behind :func:`attention` and :func:`decode`;
  :mod:`~attnlib.fused.backward`: the backward launches and
  :class:`FusedAttentionFunction`, the autograd node that runs them;
- :mod:`~attnlib.fused.compile_report`: compiling the kernels for GPUs this
  machine does not have, and what the compiler says about them.

On CUDA the kernels run natively, with autotuned tile sizes (fixed ones in
the backward pass), and ``backend="auto"`` picks this path first, for
training too: inputs that require grad get their gradients from the
backward kernels (a float ``attn_mask`` that requires grad does not, and
goes to another path). fp16 and bf16 use tensor cores from sm_80 on; fp32
inputs are multiplied in full fp32. ``window=`` skips the key tiles outside
every row's window (work ~ L x W) and ``sinks=`` seeds each row's running
maximum and sum, forward and backward; :func:`decode` takes neither (the
dispatcher never calls it). On the CPU the
kernels run in Triton's interpreter (NumPy; slow; no bfloat16), for
validation: ``backend="fused"`` runs them, ``backend="auto"`` never does.
``import attnlib`` never imports Triton; without Triton this backend says so.

Triton fixes, when it is first imported, whether this process compiles
kernels or interprets them: ``TRITON_INTERPRET=1`` at that moment makes its
own library (``tl.sum``, ``tl.max``, ...) interpreted, and compiled and
interpreted functions cannot call each other. So the environment variable
must be set before anything imports Triton, and one process runs the kernels
either on the GPU or in the interpreter, never both.
"""
from .backward import (BACKWARD_CONFIGS, FusedAttentionFunction, INTERPRETER_BACKWARD_BLOCKS, backward_arguments,
                       backward_config, gradients, sinks_gradient)
from .decode import (DECODE_CONFIGS, MIN_KEYS_PER_SPLIT, decode, decode_arguments, decode_config,
                     decode_splits, merge_partial_states)
from .forward import attention, forward, launch
from .kernels import kernel_module, kernel_source
from .layout import as_4d, key_lengths, kernel_arguments, window_reaches
from .support import (HEAD_DIMS, INTERPRETER_DTYPES, KERNEL_DTYPES, MAX_BATCH_HEADS, MAX_BLOCK, NAME,
                      ON_THE_CPU, SUPPORTS_SINKS, SUPPORTS_SOFTCAP, SUPPORTS_WINDOW, auto_declines,
                      interpreter_requested, triton_installed, triton_interprets, triton_version,
                      unaddressable_reason, unsupported_reason)
from .tiles import (AUTOTUNE_CONFIGS, AUTOTUNE_KEY, COMPILE_OPTIONS, INTERPRETER_BLOCKS,
                    SHORT_QUERY_ROWS, SPILLS_WITH_A_WINDOW_BEFORE_SM_90, TileConfig, autotune_bucket,
                    autotune_configs, length_bucket, picked_configurations, triton_config)
