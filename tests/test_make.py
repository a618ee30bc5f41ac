"""tools/make.py's decisions: which torch it installs, from where, and what it refuses."""
from __future__ import annotations

import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from attnlib import checkpoints

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


def test_every_command_prepares_the_checkpoints_after_making_the_environment(monkeypatch):
    """make env, book, pdf and test: no chapter or test is the first to meet an empty cache."""
    for command in ("env", "book", "pdf", "test"):
        done = []
        monkeypatch.setattr(make, "create_venv", lambda venv, torch_source: done.append("venv"))
        monkeypatch.setattr(make, "prepare_checkpoints", lambda venv: done.append("checkpoints"))
        for step in ("book", "pdf", "test"):
            monkeypatch.setattr(make, step, lambda venv, step=step: done.append(step))
        make.main([command])
        assert done == ["venv", "checkpoints"] + ([] if command == "env" else [command])


@pytest.mark.skipif(not checkpoints.available("minilm"), reason=checkpoints.skipped("minilm", "the test"))
def test_the_checkpoints_are_prepared_once_with_a_line_saying_so(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("ATTNLIB_CACHE", str(tmp_path))
    venv = pathlib.Path(sys.prefix)  # this test's environment
    make.prepare_checkpoints(venv, ("minilm",))
    first = capfd.readouterr().out.splitlines()
    assert first[0] == f"[tools/make.py] preparing Chapter 14's checkpoints once in {tmp_path}: minilm"
    assert re.fullmatch(r"\[tools/make\.py\] prepared in \d+ s", first[1]) and len(first) == 2
    assert [entry.name for entry in tmp_path.iterdir()] == ["minilm-0872f5d7d0e806c4"]
    make.prepare_checkpoints(venv, ("minilm",))
    assert capfd.readouterr().out == f"[tools/make.py] Chapter 14's checkpoints are already prepared in {tmp_path}\n"


@pytest.fixture
def on_debian_without_chromium(monkeypatch):
    """A Debian machine without chromium, whose commands are recorded instead of run."""
    monkeypatch.setattr(make.shutil, "which", lambda name: None if name.startswith("chromium") else f"/usr/bin/{name}")
    ran = []

    def run(command, **kwargs):
        ran.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(make.subprocess, "run", run)
    return ran


def test_a_ci_runners_user_installs_chromium_with_sudo(monkeypatch, on_debian_without_chromium):
    monkeypatch.setattr(make.os, "geteuid", lambda: 1001)
    make.install_browser()
    quiet = ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive"]
    assert on_debian_without_chromium == [["sudo", "-n", "true"], quiet + ["apt-get", "update", "-qq"],
                                          quiet + ["apt-get", "install", "-y", "-qq", "chromium"]]


def test_root_installs_chromium_without_sudo(monkeypatch, on_debian_without_chromium):
    monkeypatch.setattr(make.os, "geteuid", lambda: 0)
    make.install_browser()
    assert on_debian_without_chromium[0] == ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "update", "-qq"]


def test_a_user_whose_sudo_asks_a_password_is_told_the_browser_tests_are_skipped(monkeypatch, capsys,
                                                                                on_debian_without_chromium):
    monkeypatch.setattr(make.os, "geteuid", lambda: 1001)
    monkeypatch.setattr(make.subprocess, "run", lambda command, **kwargs: on_debian_without_chromium.append(command)
                        or subprocess.CompletedProcess(command, 1))
    make.install_browser()
    assert on_debian_without_chromium == [["sudo", "-n", "true"]], "nothing is installed"
    assert "chromium not installed: the browser test of the book will be skipped" in capsys.readouterr().out


# the caches that the book's code, its tests and their tools write and later read
CI_CACHES = ("ATTNLIB_CACHE", "XDG_CACHE_HOME", "TRITON_HOME", "TRITON_CACHE_DIR", "HF_HOME", "MPLCONFIGDIR",
             "IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "HYPOTHESIS_STORAGE_DIRECTORY", "npm_config_cache")


@pytest.mark.parametrize("status", [0, 3])
def test_ci_runs_make_test_with_every_cache_in_a_new_folder_removed_afterwards(tmp_path, status):
    """.ci/run with a stand-in for make that reports what it was given and fills each cache."""
    bin_folder, temporary = tmp_path / "bin", tmp_path / "tmp"
    bin_folder.mkdir()
    temporary.mkdir()
    (bin_folder / "make").write_text("#!/bin/sh\necho \"make $*\"\n"
                                     + "".join(f'echo "{name}=${name}"; ls -A "${name}" 2>/dev/null; '
                                               f'mkdir -p "${name}" && touch "${name}/kept"\n' for name in CI_CACHES)
                                     + f"exit {status}\n")
    (bin_folder / "make").chmod(0o755)
    environment = {**os.environ, "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}", "TMPDIR": str(temporary)}
    done = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=environment, capture_output=True, text=True)
    assert done.returncode == status, done.stderr
    printed = done.stdout.splitlines()
    assert printed[0] == "make test"
    folders = dict(line.split("=", 1) for line in printed[1:])
    assert sorted(folders) == sorted(CI_CACHES), "each cache named, each empty when make began"
    scratch = {pathlib.Path(folder).relative_to(temporary).parts[0] for folder in folders.values()}
    assert len(scratch) == 1 and len(set(folders.values())) == len(folders), "one new folder for all, one each in it"
    assert list(temporary.iterdir()) == [], "removed afterwards"
