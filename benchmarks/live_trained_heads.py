"""The stored queries and keys of Chapter 14.3's live figure (a trained head in the page).

    python benchmarks/live_trained_heads.py             # a minute on 2 busy cores

Runs the two checkpoints (``attnlib.checkpoints.load("minilm")`` and ``load("smollm2")``) on
the sentences of ``attnlib.book.live_figures.TRAINED_SENTENCES`` with attnlib as every layer's
attention (``attnlib.integrations.probes``) and keeps, for the layers of
``TRAINED_LAYERS`` and every head, the queries and keys that each layer's softmax sees:
MiniLM's (bidirectional, one sentence and no padding), SmolLM2's after RoPE (the figure
applies the causal mask). Each head's queries, and each key head's keys, are stored as
16-bit integers with one step per head, ``max |x| / 32767``: 0.003 per cent of the
head's largest coordinate. The script prints how far that rounding moves the figure's
readouts (at the scale multipliers of ``TRAINED_CHECKED_FACTORS``) from those of the
unrounded fp32 vectors.

Writes ``attnlib/book/results/trained_heads.json``, which
``attnlib.book.live_figures.trained_head_inputs`` reads, and the page's copy of it,
``_static/live/trained_heads_data.js``: a comment that says how it was made (this command,
the checkpoints, the versions, the commit and the date: :func:`stamp`), one line that hands
the figure its data, then the same JSON. Only the page that shows the figure loads it
(``_ext/live_figure_data.py``).
"""
from __future__ import annotations

import argparse
import base64
import datetime
import importlib.metadata
import json
import pathlib
import platform
import subprocess

import torch

from attnlib import checkpoints
from attnlib.book import live_figures, stored_results
from attnlib.integrations import probes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def quantised(x: torch.Tensor) -> dict:
    """``x`` ``(H, n, d)`` as 16-bit steps per head: ``{"step": [H floats], "data": base64 int16}``
    (little-endian)."""
    x = x.double()
    step = torch.tensor([float(f"{s:.6g}") for s in (x.abs().amax((1, 2)) / 32767).tolist()], dtype=torch.float64)
    steps = torch.round(x / step[:, None, None]).clamp(-32767, 32767).to(torch.int16)
    return {"step": step.tolist(), "data": base64.b64encode(steps.numpy().astype("<i2").tobytes()).decode("ascii")}


def record(name: str) -> tuple[dict, dict]:
    """The stored entry of one model, and its unrounded queries and keys ``{(sentence, layer): (q, k)}``."""
    model, tokenizer = checkpoints.load(name)
    layers = live_figures.TRAINED_LAYERS[name]
    entry = {"causal": live_figures.TRAINED_CAUSAL[name], "layers": list(layers), "sentences": []}
    exact = {}
    for at, sentence in enumerate(live_figures.TRAINED_SENTENCES):
        ids = tokenizer(sentence, return_tensors="pt")["input_ids"]
        with torch.no_grad(), probes.probe(model) as calls:
            model(input_ids=ids)
        tokens = tokenizer.convert_ids_to_tokens(ids[0].tolist())
        stored = {"tokens": [tokenizer.convert_tokens_to_string([t]) for t in tokens], "layers": []}
        for layer in layers:
            query, key = calls[layer].query[0], calls[layer].key[0]  # (Hq, n, d), (Hkv, n, d)
            assert abs(calls[layer].scale - query.shape[-1] ** -0.5) < 1e-12, calls[layer].scale
            stored["layers"].append({"q": quantised(query), "k": quantised(key)})
            exact[at, layer] = query.double(), key.double()
        entry["sentences"].append(stored)
    entry["heads"], entry["key_heads"], entry["d_k"] = query.shape[0], key.shape[0], query.shape[-1]
    entry["d_model"] = model.config.hidden_size
    return entry, exact


def stamp() -> str:
    """The data file's header: a JavaScript comment naming the command that made it, the
    checkpoints, the versions, the commit and the date (``tests/test_interactive_figures.py``
    reads it)."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain", "--untracked-files=no")
                                                     else "")
    lines = ["The stored queries and keys of Chapter 14.3's live figure (a trained head).",
             f"made by: python {pathlib.Path(__file__).relative_to(ROOT)}",
             f"commit: {commit}",
             "date: " + datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")]
    for name in live_figures.TRAINED_CAUSAL:
        c = checkpoints.CHECKPOINTS[name]
        lines.append(f"checkpoint {name}: {c.package}=={c.version} ({c.upstream}; {c.file} sha256 {c.sha256})")
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                **{p: importlib.metadata.version(p) for p in ("transformers", "gguf", "numpy")}}
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    lines.append(f"data: the same JSON as attnlib/book/results/{live_figures.TRAINED_RESULTS}")
    return "".join(f"// {line}\n" for line in lines)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    header = stamp()  # the commit as it is before this run writes anything
    data, exact = {}, {}
    for name in live_figures.TRAINED_CAUSAL:
        data[name], exact[name] = record(name)
    text = json.dumps(data, separators=(",", ":"))
    results = stored_results.RESULTS / live_figures.TRAINED_RESULTS
    results.write_text(text + "\n")
    live_figures.TRAINED_DATA.write_text(header + live_figures.TRAINED_DATA_LINE + "\n" + text + "\n")
    for path in (results, live_figures.TRAINED_DATA):
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1024:.0f} KiB)")
    # how far the 16-bit rounding moves the readouts, over every stored head and factor
    moved = {"entropy": 0.0, "sink": 0.0, "one_hot": 0.0}
    for name, heads in exact.items():
        for (sentence, layer), (query, key) in heads.items():
            for head in range(query.shape[0]):
                kv = head // (query.shape[0] // key.shape[0])
                for factor in live_figures.TRAINED_CHECKED_FACTORS:
                    rounded = live_figures.trained_head_readouts(name, sentence, layer, head, factor)
                    unrounded = live_figures.head_readouts(query[head], key[kv], factor,
                                                           live_figures.TRAINED_CAUSAL[name])
                    for what in moved:
                        moved[what] = max(moved[what], abs(getattr(rounded, what) - getattr(unrounded, what)))
    print("largest change from the rounding, over every head and factor:",
          ", ".join(f"{what} {value:.4f}" for what, value in moved.items()))
    print("(a one-hot share moves in steps of 1/rows: a row whose largest weight crossed the threshold)")


if __name__ == "__main__":
    main()
