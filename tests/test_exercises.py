"""Exercises: generated from solutions/, well formed, 0 points unsolved, full marks solved."""

from __future__ import annotations

import copy
import os
import re
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
    """At least 4 graded tests, hidden tests, and for every task hints that climb (a nudge,
    then a stronger one) without giving the answer: no line of the solution appears in them,
    and no hint appears in the notebook itself."""
    from coursekit.learner.exercises import answer, tasks_of

    nb = nbformat.read(path, as_version=4)
    tests = cells_of(nb, "test")
    assert len(tests) >= 4, "at least 4 graded tests"
    assert any("BEGIN HIDDEN TESTS" in c.source for c in tests), "at least one hidden test"
    for cell in cells_of(nb, "solution"):
        if cell.cell_type == "code":
            assert "BEGIN SOLUTION" in cell.source, cell.source[:80]
    every_hint = []
    for task in tasks_of(path):
        assert len(task.hints) >= 2, f"{task.id}: two levels of hints"
        body = answer(task).splitlines()[1:-1]  # the lines the learner writes
        lines = {re.sub(r"\s+", "", line) for line in body if len(line.strip()) >= 12}
        for hint in task.hints:
            flat = re.sub(r"\s+", "", hint)
            given = [line for line in lines if line.rstrip(";") in flat]
            assert not given, f"{task.id}: a hint gives the answer line {given}"
        every_hint += task.hints
    for cell in nb.cells:
        assert not any(h in cell.source for h in every_hint)


def wrong_variants(path: Path) -> list[tuple[nbformat.NotebookNode, dict[str, str]]]:
    """The exercise with the k-th known-wrong solution of every task that has one (k = 0,
    1, ...), and {task id: why it is wrong} for the tasks changed."""
    from coursekit.learner.exercises import with_body

    nb = nbformat.read(path, as_version=4)
    most = max(
        (len(c.metadata.get("coursekit", {}).get("wrong", [])) for c in cells_of(nb, "solution")), default=0
    )
    variants = []
    for k in range(most):
        variant, why = copy.deepcopy(nb), {}
        for cell in cells_of(variant, "solution"):
            wrong = cell.metadata.get("coursekit", {}).get("wrong", [])
            if k < len(wrong):
                cell.source = with_body(cell.source, wrong[k]["code"])
                why[cell.metadata.nbgrader.grade_id] = wrong[k]["why"]
        variants.append((variant, why))
    return variants


@pytest.mark.full
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_exercise_fails_unsolved_and_wrong_and_passes_solved(tmp_path, path):
    """nbgrader's own autograde: the stub scores 0, each known-wrong solution scores 0 on its
    task (and compiles and runs: its answer cell shows no error), the solution scores full."""
    from coursekit.learner.exercises import tasks_of

    assignment = path.parent.name
    course = course_copy(tmp_path, assignment, [path])
    students = {"unsolved": nbformat.read(course / "exercises" / assignment / path.name, as_version=4)}
    students["solved"] = nbformat.read(course / "solutions" / assignment / path.name, as_version=4)
    wrongs = {}
    for k, (variant, why) in enumerate(wrong_variants(path)):
        students[f"wrong{k}"], wrongs[f"wrong{k}"] = variant, why
    for student, nb in students.items():
        dest = course / "submitted" / student / assignment
        dest.mkdir(parents=True)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, dest / path.name)
    result = nbgrader(course, "autograde", assignment, "--force")
    assert result.returncode == 0, result.stdout + result.stderr

    from nbgrader.api import Gradebook

    tests_of = {t.id: t.tests for t in tasks_of(path)}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        unsolved = gb.find_submission_notebook(path.stem, assignment, "unsolved")
        solved = gb.find_submission_notebook(path.stem, assignment, "solved")
        assert solved.max_score > 0
        passed = [g.name for g in unsolved.grades if g.score]
        assert unsolved.score == 0, f"tests that pass without a solution: {passed}"
        failed = [g.name for g in solved.grades if g.score != g.max_score]
        assert solved.score == solved.max_score, f"the solution lost points on {failed}"
        for student, why in wrongs.items():
            scores = {
                g.name: g.score for g in gb.find_submission_notebook(path.stem, assignment, student).grades
            }
            caught = {task: [t for t in tests_of[task] if scores[t]] for task in why}
            assert not any(caught.values()), f"{student}: wrong solutions that score: {caught} ({why})"
            graded = nbformat.read(course / "autograded" / student / assignment / path.name, as_version=4)
            broken = [
                c.metadata.nbgrader.grade_id
                for c in cells_of(graded, "solution")
                if c.metadata.nbgrader.grade_id in why and any(o.output_type == "error" for o in c.outputs)
            ]
            assert not broken, f"{student}: these wrong solutions do not even compile or run: {broken}"
