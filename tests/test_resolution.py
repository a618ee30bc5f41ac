"""The README's two commands install on readers' machines, not only on ours.

Every requirement file a reader or a service installs (requirements.txt, Binder's, a graded
course's autograder) is resolved by uv with PyPI alone, for each supported Python on Linux
(x86-64, aarch64), macOS (Apple silicon) and Windows; tools/resolve.py holds the matrix.
Nothing of this machine's local wheels or pip configuration is seen: a control shows it.
"""
from __future__ import annotations

import os
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make  # noqa: E402
import resolve  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def pypi_reachable():
    reachable, why = make.index_reachable(resolve.PUBLIC_INDEX + "/pip/")
    if not reachable:
        if os.environ.get("CI"):
            pytest.fail(f"CI must check the install against PyPI, which cannot be reached: {why}")
        pytest.skip(f"PyPI cannot be reached ({why}): the resolution matrix needs it")


@pytest.fixture(scope="module")
def matrix() -> list[resolve.Resolution]:
    return resolve.resolve_all()


def test_every_requirement_file_resolves_on_every_platform_and_python(matrix):
    failed = [f"{result.case}:\n{result.error}" for result in matrix if not result.ok]
    assert not failed, "\n\n".join(failed)
    covered = {(r.case.requirements, r.case.platform, r.case.python) for r in matrix}
    assert {("requirements.txt", platform, python)
            for platform in resolve.PLATFORMS for python in resolve.PYTHONS} <= covered


def test_triton_only_on_linux_and_at_a_version_torch_allows(matrix):
    """PyPI's Linux torch is a CUDA build that pins its Triton; the range must admit it,
    and no other platform is asked for Triton, which has no wheels there."""
    for result in matrix:
        on_linux = result.case.platform.startswith("linux")
        assert ("triton" in result.resolved) == on_linux, result.case
        assert result.resolved["torch"] == make.pinned_torch((ROOT / "requirements.txt").read_text()), result.case


def test_pinned_packages_resolve_to_their_pins(matrix):
    """A pin that the resolver silently replaced (a marker that never applies) would leave a
    platform with versions the stored outputs were not made with."""
    pinned: dict[str, set[str]] = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_.\-]+)==([0-9][^;\s]*)", line)
        if match:
            pinned.setdefault(match.group(1).lower(), set()).add(match.group(2))
    for result in matrix:
        if result.case.requirements == "requirements.txt":
            for name, versions in pinned.items():
                assert result.resolved[name] in versions, (result.case, name, result.resolved[name])


def test_the_resolver_sees_nothing_local():
    """Control: this machine holds a local torch 2.13.0+cpu wheel that pip finds through its
    configuration. PyPI has no such build, so a resolution that found it would be using it."""
    case = resolve.Case("control", "linux-x86_64", "3.11")
    result = resolve.resolve(case, f"torch=={make.pinned_torch((ROOT / 'requirements.txt').read_text())}+cpu\n")
    assert not result.ok and "torch" in result.error


def test_intel_macs_are_still_without_a_torch():
    """PyTorch publishes no macOS x86-64 wheels after 2.2. When it does again, this fails:
    add the platform to tools/resolve.py's PLATFORMS and to the README."""
    case = resolve.Case("requirements.txt", "macos-x86_64", "3.12")
    result = resolve.resolve(case, (ROOT / "requirements.txt").read_text())
    assert not result.ok
    assert re.search(r"torch==\S+ has no wheels with a matching platform tag", result.error), result.error


def test_declared_pythons_agree_with_the_tested_range():
    low, high = make.SUPPORTED_PYTHONS
    requires = re.search(r'^requires-python = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.M)
    assert requires and requires.group(1) == f">={low[0]}.{low[1]}", requires
    assert f"Python {low[0]}.{low[1]} to {high[0]}.{high[1]}" in (ROOT / "README.md").read_text()
    binder = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert binder.removeprefix("python-") in resolve.PYTHONS, binder


def test_the_publishing_workflow_installs_what_the_matrix_resolves():
    """The workflow builds with `make book` (tests/test_publishing_workflow.py), so it installs
    requirements.txt, on ubuntu-latest (linux-x86_64) with the Python it sets up."""
    workflow = (ROOT / ".github" / "workflows" / "publish.yml").read_text()
    versions = re.findall(r'python-version:\s*"?([0-9.]+)"?', workflow)
    assert versions and all(version in resolve.PYTHONS for version in versions), versions
    assert "runs-on: ubuntu-latest" in workflow and "run: make book" in workflow
