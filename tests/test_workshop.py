"""The README's workshop guide, followed end to end on a copy of the repository: its shell
block is read from the README and run as one bash session without .venv on PATH, with two
students' work collected (one as a folder, one as an LMS zip)."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import zipfile

import nbformat
import pytest

from conftest import ROOT

pytestmark = pytest.mark.full


def guide_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Workshop guide", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_workshop_guide_end_to_end(tmp_path):
    repo = tmp_path / "course"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in files.split():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, repo / rel)
    (repo / ".venv").symlink_to(ROOT / ".venv")
    commands = guide_commands()
    assert any("generate_assignment" in c for c in commands) and any("coursekit grade" in c for c in commands)

    # Step 3 of the guide, done first (it needs only committed files): the students' work,
    # one as a folder of the released notebook, one solved as an LMS zip.
    released = repo / "exercises" / "01_rust" / "01_values_moves_clone.ipynb"
    folder = repo / "submissions" / "ada" / "01_rust"
    folder.mkdir(parents=True)
    shutil.copy(released, folder / released.name)
    solved = nbformat.read(repo / "solutions" / "01_rust" / released.name, as_version=4)
    with zipfile.ZipFile(repo / "submissions" / "grace_attempt_1.zip", "w") as z:
        z.writestr(released.name, nbformat.writes(solved))

    # The block runs as an instructor's shell would: one session, nothing of .venv on PATH.
    path = [p for p in os.environ["PATH"].split(os.pathsep) if ".venv" not in p]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"PATH": os.pathsep.join(path)}
    script = "set -euo pipefail\n" + "\n".join(commands)
    result = subprocess.run(
        ["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=3600
    )
    assert result.returncode == 0, f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"

    # Step 1 reproduces the committed release (the tracked files: the browser test may have a
    # scratch notebook in the repository's exercises/ meanwhile).
    for rel in files.split():
        if rel.startswith("exercises/01_rust/"):
            assert (repo / rel).read_text() == (ROOT / rel).read_text(), rel
    assert sorted(p.name for p in (repo / "exercises" / "01_rust").iterdir()) == sorted(
        rel.rsplit("/", 1)[1] for rel in files.split() if rel.startswith("exercises/01_rust/")
    )
    rows = {r["student"]: r for r in csv.DictReader((repo / "grading" / "grades.csv").open())}
    assert float(rows["ada"]["score"]) == 0 and float(rows["grace"]["score"]) == float(
        rows["grace"]["max_score"]
    )
    assert (repo / "grading" / "feedback" / "grace" / "01_rust" / "01_values_moves_clone.html").is_file()
