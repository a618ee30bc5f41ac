"""Resolve the project's requirement files with PyPI alone, for every supported platform and Python.

A reader's machine has none of this machine's local wheels or indexes, and a platform or Python
we do not run on can still break the install (a pin with no wheel there, two pins that exclude
each other). uv's resolver answers for any target without that machine (`--python-platform`,
`--python-version`), so this checks them all here:

    python tools/resolve.py            # the whole matrix, one line per case
    python tools/resolve.py --list     # the cases only

tests/test_resolution.py runs the same matrix in `make test`.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make import OLDEST_MACOS, ROOT, SUPPORTED_PYTHONS  # noqa: E402

PUBLIC_INDEX = "https://pypi.org/simple"
# uv's names for the platforms readers use. torch 2.13's macOS wheels are built for macOS 14
# (macosx_14_0_arm64): that is the oldest macOS the book supports.
PLATFORMS = {
    "linux-x86_64": "x86_64-manylinux_2_28",
    "linux-aarch64": "aarch64-manylinux_2_28",
    "macos-arm64": "aarch64-apple-darwin",
    "windows-x86_64": "x86_64-pc-windows-msvc",
}
MACOS_VERSION = ".".join(map(str, OLDEST_MACOS))
# PyTorch publishes no macOS x86-64 wheels after torch 2.2; the book needs a newer torch.
UNSUPPORTED = {"macos-x86_64": "x86_64-apple-darwin"}
TARGETS = {**PLATFORMS, **UNSUPPORTED}
PYTHONS = [f"3.{minor}" for minor in range(SUPPORTED_PYTHONS[0][1], SUPPORTED_PYTHONS[1][1] + 1)]


@dataclass(frozen=True)
class Case:
    """One requirement file resolved for one platform and Python."""
    requirements: str
    platform: str
    python: str

    def __str__(self) -> str:
        return f"{self.requirements} on {self.platform}, Python {self.python}"


@dataclass
class Resolution:
    case: Case
    resolved: dict[str, str]  # package -> version; empty when resolution failed
    error: str

    @property
    def ok(self) -> bool:
        return not self.error


def autograder_requirements() -> str:
    """What a graded course's autograder installs (assignments/build.py), attnlib from this checkout."""
    sys.path.insert(0, str(ROOT / "assignments"))
    import build  # noqa: PLC0415 (the assignments builder imports torch and otter only when used)

    url, _ = build.repository()
    text = build.requirements("main")
    return re.sub(rf"attnlib\[book\] @ git\+{re.escape(url)}@\S+", f"attnlib[book] @ {ROOT.as_uri()}", text)


def requirement_files() -> dict[str, str]:
    """Name -> text of every requirement set a reader's or a service's machine installs."""
    return {
        "requirements.txt": (ROOT / "requirements.txt").read_text(),
        "binder/requirements.txt": (ROOT / "binder" / "requirements.txt").read_text(),
        "autograder": autograder_requirements(),
    }


# Binder and the autograder run on Linux x86-64 only.
LINUX_ONLY = {"binder/requirements.txt", "autograder"}


def cases() -> list[Case]:
    found = []
    for name in requirement_files():
        platforms = ["linux-x86_64"] if name in LINUX_ONLY else list(PLATFORMS)
        # the autograder runs the Python that built it (assignments/build.py writes its version
        # into otter's configuration), with the NumPy and SymPy that checked its keys there
        pythons = [f"{sys.version_info.major}.{sys.version_info.minor}"] if name == "autograder" else PYTHONS
        found += [Case(name, platform, python) for platform in platforms for python in pythons]
    return found


def public_only(text: str) -> str:
    """The file as PyPI alone would serve it: extra index lines dropped (their packages must
    also resolve from PyPI), and `-e .[book]` pointed at this checkout."""
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("--extra-index-url", "--index-url", "--find-links", "-f ")):
            continue
        kept.append(f"-e {ROOT}[book]" if stripped == "-e .[book]" else line)
    return "\n".join(kept) + "\n"


def uv_environment(platform: str) -> dict[str, str]:
    """This process's environment without pip's or uv's settings, so that nothing local is seen."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("UV_", "PIP_"))}
    if platform.startswith("macos"):
        env["MACOSX_DEPLOYMENT_TARGET"] = MACOS_VERSION
    return env


def uv() -> str:
    found = Path(sys.executable).parent / ("uv.exe" if os.name == "nt" else "uv")
    return str(found) if found.exists() else "uv"


def resolve(case: Case, text: str) -> Resolution:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "requirements.txt"
        path.write_text(public_only(text))
        completed = subprocess.run(
            # --no-python-downloads: uv would otherwise fetch an interpreter for each --python-version;
            # this one builds what needs building, and the target Python is only a tag to match
            [uv(), "pip", "compile", str(path), "--no-config", "--no-python-downloads", "--python", sys.executable,
             "--index-url", PUBLIC_INDEX,
             "--python-platform", TARGETS[case.platform], "--python-version", case.python,
             "--no-header", "--no-annotate", "--quiet", "--color", "never"],
            capture_output=True, text=True, env=uv_environment(case.platform), cwd=ROOT, timeout=600)
    if completed.returncode:
        return Resolution(case, {}, completed.stderr.strip() or completed.stdout.strip())
    resolved = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", completed.stdout, flags=re.M))
    return Resolution(case, {name.lower(): version for name, version in resolved.items()}, "")


def resolve_all(selected: list[Case] | None = None, workers: int = 8) -> list[Resolution]:
    files = requirement_files()
    selected = cases() if selected is None else selected
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda case: resolve(case, files[case.requirements]), selected))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print the cases without resolving them")
    args = parser.parse_args()
    if args.list:
        print("\n".join(map(str, cases())))
        return
    failed = 0
    for result in resolve_all():
        if result.ok:
            versions = ", ".join(f"{name} {result.resolved[name]}" for name in ("torch", "triton", "numpy")
                                 if name in result.resolved)
            print(f"ok    {result.case}: {versions}")
        else:
            failed += 1
            print(f"FAIL  {result.case}:\n      " + result.error.replace("\n", "\n      "))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
