"""benchmarks/gpu_session.sh rehearsed on the CPU (DRY_RUN=1): every step writes its results and the summary.

The GPU tests skip without a GPU, but their XML names each test, so the three
selections show. Two stand-in tests join them: one fails (its name shows in the
summary), one sleeps past its step's limit (the interrupt keeps pytest's report
and XML). The benchmarks run their sweeps in Triton's interpreter on tiny
shapes. About 70 s on two idle cores, most of it the stand-in waiting for its interrupt.

The stand-in sleeps in the offsets step, which runs in one process: a step of
pytest-xdist workers interrupted while they start up (seconds here, when the
cores are busy) is killed instead; on the GPU machine they start long before
any limit.
"""
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ElementTree

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"
#: What comes back from a lent GPU's $OUT (/work/.library/device/README.md).
MOST_FILES_BACK = 8
#: The offsets step's limit and the grace after its interrupt, in the rehearsal. On two cores
#: busy with other work (load average 12), pytest took more than 5 s to write its report and XML
#: after the interrupt, and more than 15 s to start: these leave room for both.
OFFSETS_LIMIT, GRACE = 45, 15

STAND_IN = '''
import time


def test_offsets_past_2_to_the_31_that_outlast_their_step():
    time.sleep(600)


def test_gradients_that_fail():
    assert 1 == 2, "a wrong gradient"
'''


def session(tmp_path, **env):
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env=os.environ | {"PYTHON": sys.executable, "OUT": str(out), "DRY_RUN": "1",
                                              "ATTNLIB_COMMIT": "c0ffee1"} | env)
    return result, out


def names_in_junit_xml(xml_bytes: bytes) -> set[str]:
    return {case.get("name") for case in ElementTree.fromstring(xml_bytes).iter("testcase") if case.get("name")}


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("session")
    (tmp_path / "test_stand_in.py").write_text(STAND_IN)
    result, out = session(tmp_path, GPU_TESTS=f"tests/test_fused_gpu.py {tmp_path / 'test_stand_in.py'}",
                          JOBS="2", GRACE=str(GRACE), TESTS_OFFSETS_LIMIT=str(OFFSETS_LIMIT))
    with tarfile.open(out / "logs.tar.gz") as archive:
        logs = {pathlib.Path(m.name).name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}
    return result, out, logs


def test_every_step_runs_and_the_summary_says_how_it_ended(rehearsal):
    result, out, _ = rehearsal
    assert result.returncode == 0, result.stderr[-2000:]
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary[0].startswith("attnlib c0ffee1; tree ") and "dry run: 1" in summary[0]
    outcome = {line.split(":")[0]: line for line in summary if not line.startswith(" ")}
    assert set(outcome) >= {"machine", "tests_offsets", "tests_backward", "tests_rest", "fused_gpu",
                            "fused_window_gpu", "fused_backward_gpu", "session"}
    assert "exit 1" in outcome["tests_backward"] and "1 failed" in outcome["tests_backward"]
    assert any(line.startswith("    FAILED") and "test_gradients_that_fail" in line for line in summary)
    assert f"interrupted at its limit of {OFFSETS_LIMIT} s" in outcome["tests_offsets"]
    assert outcome["tests_rest"].startswith("tests_rest: exit 0")
    assert outcome["fused_gpu"].startswith("fused_gpu: exit 0")
    assert outcome["fused_window_gpu"].startswith("fused_window_gpu: exit 0")
    assert outcome["fused_backward_gpu"].startswith("fused_backward_gpu: exit 0")
    assert result.stdout.splitlines() == summary  # what the device tool's output tail shows


def test_at_most_the_files_that_come_back_and_the_logs_in_one_archive(rehearsal):
    _, out, logs = rehearsal
    assert sorted(p.name for p in out.iterdir()) == ["fused_backward_gpu.json", "fused_gpu.json",
                                                     "fused_window_gpu.json", "logs.tar.gz", "summary.txt"]
    assert len(list(out.iterdir())) <= MOST_FILES_BACK
    assert {f"{step}.log" for step in ("machine", "tests_offsets", "tests_backward", "tests_rest", "fused_gpu",
                                       "fused_window_gpu", "fused_backward_gpu")} <= set(logs)


def test_the_offsets_tests_run_alone_then_the_backward_tests_then_the_rest(rehearsal):
    _, _, logs = rehearsal
    collected = subprocess.run([sys.executable, "-m", "pytest", "tests/test_fused_gpu.py", "--collect-only", "-q",
                                "-p", "no:cacheprovider", "-o", "addopts="], capture_output=True, text=True,
                               cwd=ROOT, timeout=120).stdout
    every_gpu_test = {line.split("::")[1] for line in collected.splitlines() if "::" in line}
    offsets, backward, rest = (names_in_junit_xml(logs[f"tests_{step}.xml"]) for step in ("offsets", "backward", "rest"))
    assert offsets == {"test_offsets_past_2_to_the_31_elements", "test_gradients_at_offsets_past_2_to_the_31_elements"}
    assert "test_decoding_one_query_against_a_cache[32768]" in rest
    assert "test_gradients_that_fail" in backward and "test_two_backward_runs_are_identical" in backward
    assert not (backward & rest) and not (offsets & (backward | rest))
    assert every_gpu_test <= offsets | backward | rest


def test_an_interrupted_step_keeps_pytest_s_report(rehearsal):
    _, _, logs = rehearsal
    assert b"KeyboardInterrupt" in logs["tests_offsets.log"] and b"slowest 15 durations" in logs["tests_offsets.log"]
    assert "test_offsets_past_2_to_the_31_elements" in names_in_junit_xml(logs["tests_offsets.xml"])


def test_the_benchmarks_write_their_json_with_the_commit(rehearsal):
    _, out, _ = rehearsal
    forward = json.loads((out / "fused_gpu.json").read_text())
    assert forward["machine"]["commit"] == "c0ffee1" and forward["points"] and not forward["not_measured"]
    assert all(p["fused_decode_GBps"] and p["fused_GBps"] for p in forward["decode_points"])
    backward = json.loads((out / "fused_backward_gpu.json").read_text())
    assert backward["points"] and all(p["check"]["passed"] for p in backward["points"])
    window = json.loads((out / "fused_window_gpu.json").read_text())
    assert window["machine"]["commit"] == "c0ffee1" and window["points"]
    assert all(p["fused_ms"] and p["fused_train_ms"] and p["fused_max_abs_diff"] < 1e-2 for p in window["points"])


def test_a_spent_session_runs_no_step_and_says_so(tmp_path):
    result, out = session(tmp_path, SESSION_SECONDS="1")
    assert result.returncode == 0
    summary = (out / "summary.txt").read_text()
    assert summary.count("not run") == 7
    assert not (out / "fused_gpu.json").exists()
