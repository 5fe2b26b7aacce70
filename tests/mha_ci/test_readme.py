"""The README opens with the two commands and carries the CI guide as generated from pipelines/."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in block.strip().splitlines()] == [["make", "ci"], ["make", "test"]]


def test_ci_script_calls_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_ci_guide_is_what_pipelines_generate():
    guide = subprocess.run([sys.executable, "-m", "mha_ci", "export", "ci-guide"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout
    text = (ROOT / "README.md").read_text()
    embedded = text.split("<!-- ci-guide:start", 1)[1].split("-->\n", 1)[1]
    embedded = embedded.split("<!-- ci-guide:end -->", 1)[0]
    assert embedded == guide, "README's CI guide is stale: regenerate it with `mha-ci export ci-guide`"
