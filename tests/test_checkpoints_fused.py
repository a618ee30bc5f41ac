"""SmolLM2 and MiniLM with attnlib's fused kernel as their attention, in Triton's interpreter,
against transformers' eager attention (Chapter 14 shows MiniLM's; SmolLM2's 30 layers take
about half a minute in the interpreter, so its check lives here)."""
import os

os.environ["TRITON_INTERPRET"] = "1"  # before anything in this process imports Triton

import pytest  # noqa: E402
import torch  # noqa: E402

from attnlib import checkpoints  # noqa: E402
from interpreter import skip_without_triton, triton_interprets  # noqa: E402,F401  (autouse)

skip_without_triton()


@pytest.mark.skipif(not checkpoints.available("smollm2"), reason=checkpoints.skipped("smollm2", "the test"))
def test_smollm2_logits_on_the_fused_path_match_eager():
    import attnlib
    from attnlib.integrations import probes

    model, tokenizer = checkpoints.load("smollm2")
    tokens = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        eager = model(input_ids=tokens).logits
        with probes.probe(model, record=False, backend="fused"):
            fused = model(input_ids=tokens).logits
            assert attnlib.last_dispatch().backend == "fused"
    # fp32 through 30 layers, the kernel summing in its own order: logits of size ~20
    assert (fused - eager).abs().max() < 1e-3
    assert torch.equal(fused[0, -1].argmax(), eager[0, -1].argmax())
