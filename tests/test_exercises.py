"""Exercises: generated from solutions/, well formed, 0 points unsolved, full marks solved."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT

NBGRADER = str(Path(sys.executable).parent / "nbgrader")
ASSIGNMENTS = sorted(d.name for d in (ROOT / "solutions").iterdir() if d.is_dir())
SOURCES = sorted((ROOT / "solutions").glob("*/*.ipynb"))


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    # nbgrader runs `alembic` from PATH when it creates a gradebook
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [NBGRADER, *args], cwd=course, env=env, capture_output=True, text=True, timeout=3600
    )


def course_copy(tmp: Path, assignment: str, notebooks: list[Path] | None = None) -> Path:
    """A scratch course directory holding the source of one assignment (or some of its
    notebooks), with the student version generated."""
    shutil.copy(ROOT / "nbgrader_config.py", tmp / "nbgrader_config.py")
    dest = tmp / "solutions" / assignment
    dest.mkdir(parents=True)
    for nb in notebooks or sorted((ROOT / "solutions" / assignment).glob("*.ipynb")):
        shutil.copy(nb, dest / nb.name)
    result = nbgrader(tmp, "generate_assignment", assignment, "--force")
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp


def cells_of(nb, kind):
    def nbg(c):
        return c.metadata.get("nbgrader", {})

    if kind == "test":
        return [c for c in nb.cells if nbg(c).get("grade") and not nbg(c).get("solution")]
    return [c for c in nb.cells if nbg(c).get("solution")]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_exercises_are_what_nbgrader_generates(tmp_path, assignment):
    course = course_copy(tmp_path, assignment)
    generated = sorted((course / "exercises" / assignment).glob("*.ipynb"))
    tracked = subprocess.run(  # committed files only: the browser test may add a scratch one
        ["git", "ls-files", f"exercises/{assignment}/*.ipynb"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    committed = sorted(ROOT / rel for rel in tracked)
    assert [p.name for p in generated] == [p.name for p in committed]
    for new, old in zip(generated, committed, strict=True):
        assert new.read_text() == old.read_text(), f"{old} is stale: run nbgrader generate_assignment"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_exercise_notebook_is_well_formed(path):
    nb = nbformat.read(path, as_version=4)
    tests = cells_of(nb, "test")
    assert len(tests) >= 4, "at least 4 graded tests"
    assert any("BEGIN HIDDEN TESTS" in c.source for c in tests), "at least one hidden test"
    hints = []
    for cell in cells_of(nb, "solution"):
        if cell.cell_type == "code":
            assert "BEGIN SOLUTION" in cell.source, cell.source[:80]
            hints.append(cell.metadata.get("coursekit", {}).get("hint"))
            assert hints[-1], f"no hint for {cell.metadata.nbgrader.grade_id}"
    # Hints are given on request (coursekit check --hints), never printed in the notebook.
    for cell in nb.cells:
        assert not any(h in cell.source for h in hints)


@pytest.mark.full
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_exercise_fails_unsolved_and_passes_solved(tmp_path, path):
    assignment = path.parent.name
    course = course_copy(tmp_path, assignment, [path])
    for student, source in (("unsolved", course / "exercises"), ("solved", course / "solutions")):
        dest = course / "submitted" / student / assignment
        dest.mkdir(parents=True)
        nb = nbformat.read(source / assignment / path.name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, dest / path.name)
    result = nbgrader(course, "autograde", assignment, "--force")
    assert result.returncode == 0, result.stdout + result.stderr

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        unsolved = gb.find_submission_notebook(path.stem, assignment, "unsolved")
        solved = gb.find_submission_notebook(path.stem, assignment, "solved")
        assert solved.max_score > 0
        passed = [g.name for g in unsolved.grades if g.score]
        assert unsolved.score == 0, f"tests that pass without a solution: {passed}"
        failed = [g.name for g in solved.grades if g.score != g.max_score]
        assert solved.score == solved.max_score, f"the solution lost points on {failed}"
