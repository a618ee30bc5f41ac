"""What Colab installs from git is the whole library with its stored results, and it never asks for torch."""
import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_wheel_holds_every_module_and_leaves_torch_alone(tmp_path):
    source = tmp_path / "source"  # a copy, so that the build leaves no build/ folder in the project
    shutil.copytree(ROOT / "attnlib", source / "attnlib", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(tmp_path), str(source)],
        check=True, capture_output=True, text=True,
    )
    (wheel,) = tmp_path.glob("attnlib-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(n).decode() for n in names if n.endswith("METADATA"))
    modules = {p.relative_to(source).as_posix() for p in (source / "attnlib").rglob("*.py")}
    modules |= {p.relative_to(source).as_posix() for p in (source / "attnlib" / "book" / "results").glob("*.json")}
    assert modules <= names, f"missing from the wheel: {sorted(modules - names)}"
    requirements = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requirements and not any("torch" in line and "extra" not in line for line in requirements)
