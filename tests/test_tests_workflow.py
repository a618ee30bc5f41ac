"""The tests workflow (.github/workflows/tests.yml) runs the README's test command on a fresh
GitHub runner for every push and pull request, caching nothing that could hide an install step,
and keeps the test log. It cannot run here, so its structure is checked instead."""
import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "tests.yml"


def workflow() -> dict:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    loaded["on"] = loaded.pop(True, loaded.get("on"))  # YAML 1.1 reads the bare key `on` as True
    return loaded


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", readme, flags=re.S).group(1)
    (test,) = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip().endswith(" test")]
    return test


def steps() -> list[dict]:
    return workflow()["jobs"]["test"]["steps"]


def test_it_runs_for_every_push_and_pull_request():
    triggers = workflow()["on"]
    assert "push" in triggers and "pull_request" in triggers
    assert not (triggers["push"] or {}).get("branches"), "every branch, not only main"


def test_it_runs_the_readmes_test_command_on_a_fresh_ubuntu_runner_with_python_3_11():
    job = workflow()["jobs"]["test"]
    assert job["runs-on"] == "ubuntu-latest"
    assert "3.11" in job["strategy"]["matrix"]["python"]
    assert job["timeout-minutes"] <= 90
    (run,) = [step for step in steps() if "make" in step.get("run", "")]
    command, _, logged = run["run"].strip().partition(" 2>&1 | tee ")
    assert command == readme_test_command() == "make test"
    # a pipeline's status is tee's unless bash runs with pipefail, which `shell: bash` sets
    assert logged == "test.log" and run["shell"] == "bash"


def test_nothing_is_cached_between_runs():
    for step in steps():
        assert not step.get("uses", "").startswith("actions/cache"), step
        assert "cache" not in (step.get("with") or {}), step


def test_the_python_is_the_matrixs_and_the_browser_is_checked_before_the_tests():
    names = [step.get("name") or step["uses"] for step in steps()]
    python = next(step for step in steps() if step.get("uses", "").startswith("actions/setup-python@"))
    assert python["with"]["python-version"] == "${{ matrix.python }}"
    assert names.index("check that the browser tests have chromium") < names.index("make test")


def test_the_log_is_uploaded_whatever_the_outcome():
    (upload,) = [step for step in steps() if step.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()" and upload["with"]["path"] == "test.log"
    assert steps().index(upload) == len(steps()) - 1
