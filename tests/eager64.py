"""eager64: transformers' eager attention with its one float32 softmax computed in float64.

The Llama family's eager path runs its softmax in float32 even in a float64 model; within
:class:`float64_softmax` that softmax runs in float64, so the eager code becomes a float64
reference that owes nothing to attnlib.
"""
import torch


class float64_softmax:
    """Within it, a softmax asked for float32 of a float64 input runs in float64 (eager64)."""

    def __enter__(self):
        self.original = torch.nn.functional.softmax

        def softmax(input, dim=None, _stacklevel=3, dtype=None):
            if dtype == torch.float32 and input.dtype == torch.float64:
                dtype = torch.float64
            return self.original(input, dim=dim, dtype=dtype)

        torch.nn.functional.softmax = softmax

    def __exit__(self, *exc):
        torch.nn.functional.softmax = self.original
