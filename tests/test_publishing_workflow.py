"""The publishing workflow (.github/workflows/publish.yml) is valid GitHub Actions YAML that
builds the book with the README's command on every push to main and deploys _build/html to
GitHub Pages. It cannot run here, so its structure is checked instead."""
import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "publish.yml"


def workflow() -> dict:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the bare key `on` as the boolean True
    loaded["on"] = loaded.pop(True, loaded.get("on"))
    return loaded


def readme_build_command() -> str:
    """The command the README's "Two commands" block gives for building the book."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", readme, flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    (build,) = [command for command in commands if command.endswith(" book")]
    return build


def steps(job: str) -> list[dict]:
    return workflow()["jobs"][job]["steps"]


def test_it_runs_on_every_push_to_main():
    assert workflow()["on"]["push"]["branches"] == ["main"]


def test_every_job_runs_somewhere_and_every_step_does_one_thing():
    jobs = workflow()["jobs"]
    assert set(jobs) == {"build", "deploy"}
    for name, job in jobs.items():
        assert job["runs-on"], name
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), f"{name}: a step must either use an action or run a command: {step}"


def test_it_builds_with_the_readmes_command():
    commands = [step["run"].strip() for step in steps("build") if "run" in step]
    assert commands[0] == readme_build_command() == "make book", commands
    # then the Jupyter edition, for the Colab and Binder buttons (tests/test_jupyter_edition.py runs
    # its push), and the PDF into _build/html before it is uploaded (tests/test_book_pdf.py checks it)
    assert [command.splitlines()[0] for command in commands[1:]] == ["make jupyter-edition", "make pdf"], commands
    names = [step.get("name") or step["uses"] for step in steps("build")]
    assert names.index("build the book's PDF") < [i for i, n in enumerate(names) if "upload-pages-artifact" in n][0]


def test_it_uploads_the_built_html_and_deploys_it_to_pages_after_the_build():
    checkout, python = steps("build")[:2]
    assert checkout["uses"].startswith("actions/checkout@")
    assert python["uses"].startswith("actions/setup-python@")
    (upload,) = [s for s in steps("build") if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload["with"]["path"] == "_build/html"
    deploy = workflow()["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]
    # contents: write for the Jupyter edition's branch
    assert workflow()["permissions"] == {"contents": "write", "pages": "write", "id-token": "write"}


def test_the_readme_says_how_to_turn_it_on():
    publishing = (ROOT / "README.md").read_text().split("## Publishing", 1)[1].split("\n## ", 1)[0]
    assert ".github/workflows/publish.yml" in publishing
    assert "GitHub Actions" in publishing and "Pages" in publishing
