"""tools/make.py's decisions: which torch it installs, from where, and what it refuses."""
from __future__ import annotations

import importlib.metadata
import pathlib
import re
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make  # noqa: E402

# Dependencies as PyPI's Linux torch 2.13.0 wheel declares some of them (uv pip compile shows
# the rest): the CUDA runtime comes as separate packages.
CUDA_WHEEL_REQUIRES = ["filelock", "sympy>=1.13.3",
                       'nvidia-cublas==13.1.1.3; platform_system == "Linux"',
                       'cuda-toolkit[cublas,cudart]==13.0.3.0; platform_system == "Linux"']


def test_the_installed_torch_is_classified_by_its_own_build():
    """The classification of this environment's torch agrees with what torch says of itself."""
    requires = importlib.metadata.requires("torch") or []
    assert make.is_cuda_build(requires) == (torch.version.cuda is not None)


def test_a_cuda_wheels_dependencies_mark_it_as_one():
    assert make.is_cuda_build(CUDA_WHEEL_REQUIRES)
    assert not make.is_cuda_build([r for r in CUDA_WHEEL_REQUIRES if "cuda" not in r and "nvidia" not in r])
    assert not make.is_cuda_build(["cudaq"]), "a name that merely begins with cuda is no CUDA runtime"


def test_the_torch_pin_is_read_from_requirements():
    text = (ROOT / "requirements.txt").read_text()
    version = make.pinned_torch(text)
    assert f"\ntorch=={version}\n" in f"\n{text}"
    with pytest.raises(SystemExit, match="exactly once"):
        make.pinned_torch(text + "torch==9.9.9\n")


@pytest.mark.parametrize("version", [(3, 9), (3, 15), (2, 7)])
def test_an_unsupported_python_is_refused_by_name(version):
    with pytest.raises(SystemExit, match=rf"Python {version[0]}\.{version[1]} runs this script.*needs Python 3\.10"):
        make.check_python(version)


def test_supported_pythons_pass():
    low, high = make.SUPPORTED_PYTHONS
    make.check_python(low)
    make.check_python(high)


def test_keeping_the_environments_torch_drops_its_pins_only():
    text = 'torch==2.13.0\ntriton>=3.6,<3.10; sys_platform == "linux"\nnumpy==2.4.6; python_version >= "3.11"\n'
    with_triton = make.requirements_keeping("2.11.0+cu130", triton_installed=True, requirements=text)
    assert with_triton.splitlines() == ['numpy==2.4.6; python_version >= "3.11"', "torch==2.11.0+cu130"]
    without = make.requirements_keeping("2.11.0+cpu", triton_installed=False, requirements=text)
    assert 'triton>=3.6,<3.10; sys_platform == "linux"' in without.splitlines()
    assert "torch==2.13.0" not in without.splitlines()


@pytest.fixture
def on_linux_without_the_cpu_index(monkeypatch):
    monkeypatch.setattr(make.sys, "platform", "linux")
    monkeypatch.setattr(make, "index_reachable", lambda url, timeout=10.0: (False, "unreachable in this test"))
    installed = []
    monkeypatch.setattr(make, "pip", lambda venv, *args: installed.append(args))
    return installed


def offered(requires: list[str]) -> dict:
    """A pip --report entry for a torch wheel with these dependencies."""
    return {"metadata": {"version": "2.13.0", "requires_dist": requires},
            "download_info": {"url": "https://example.invalid/torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl"}}


def test_without_the_cpu_index_a_cuda_build_is_refused_with_the_ways_out(monkeypatch, on_linux_without_the_cpu_index):
    monkeypatch.setattr(make, "configured_index_torch", lambda venv, version: offered(CUDA_WHEEL_REQUIRES))
    with pytest.raises(SystemExit) as refused:
        make.install_cpu_torch(pathlib.Path("unused"), "2.13.0")
    message = str(refused.value)
    assert "only a CUDA build" in message and "TORCH=env" in message and "TORCH=cuda" in message
    assert on_linux_without_the_cpu_index == [], "nothing may be installed after the refusal"


def test_without_the_cpu_index_a_cpu_build_from_pips_index_is_installed(monkeypatch, on_linux_without_the_cpu_index):
    item = offered(["filelock", "sympy>=1.13.3"])
    monkeypatch.setattr(make, "configured_index_torch", lambda venv, version: item)
    make.install_cpu_torch(pathlib.Path("unused"), "2.13.0")
    assert on_linux_without_the_cpu_index == [("install", "--no-deps", item["download_info"]["url"])]


def test_with_the_cpu_index_torch_comes_from_it(monkeypatch):
    monkeypatch.setattr(make.sys, "platform", "linux")
    monkeypatch.setattr(make, "index_reachable", lambda url, timeout=10.0: (True, "reachable"))
    installed = []
    monkeypatch.setattr(make, "pip", lambda venv, *args: installed.append(args))
    make.install_cpu_torch(pathlib.Path("unused"), "2.13.0")
    assert installed == [("install", "--no-deps", "--index-url", make.CPU_INDEX, "torch==2.13.0+cpu")]


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_macos_and_windows_take_the_package_indexs_build(monkeypatch, platform):
    monkeypatch.setattr(make.sys, "platform", platform)
    monkeypatch.setattr(make, "index_reachable", lambda url, timeout=10.0: pytest.fail("no index probe needed"))
    monkeypatch.setattr(make, "pip", lambda venv, *args: pytest.fail("requirements.txt installs torch there"))
    make.install_cpu_torch(pathlib.Path("unused"), "2.13.0")


def test_torch_env_lets_the_new_venv_import_this_environments_torch(tmp_path):
    """TORCH=env from inside a venv (this test's): --system-site-packages alone would show the
    new venv the base interpreter's packages, not this environment's torch."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    make.see_this_environment(venv)
    found = subprocess.run([str(make.venv_file(venv, "python")), "-c", "import torch; print(torch.__file__)"],
                           capture_output=True, text=True)
    assert found.returncode == 0, found.stderr[-500:]
    assert found.stdout.strip() == torch.__file__


def test_an_intel_mac_is_refused_with_the_ways_on():
    with pytest.raises(SystemExit, match="Intel Macs.*Colab.*docker run"):
        make.check_macos("x86_64", "14.5")


@pytest.mark.parametrize("release", ["13.6.1", "12.7", "10.15.7"])
def test_a_mac_older_than_torchs_wheels_is_refused_by_version(release):
    with pytest.raises(SystemExit, match=rf"macOS {re.escape(release)}; torch's macOS wheels need macOS 14\.0"):
        make.check_macos("arm64", release)


@pytest.mark.parametrize("release", ["14.0", "15.2", "26.1"])
def test_apple_silicon_from_macos_14_passes(release):
    make.check_macos("arm64", release)
