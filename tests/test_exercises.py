"""Exercises: generated from solutions/, well formed, 0 points unsolved, full marks solved."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT

ASSIGNMENTS = sorted(d.name for d in (ROOT / "solutions").iterdir() if d.is_dir())
SOURCES = sorted((ROOT / "solutions").glob("*/*.ipynb"))


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    """`nbgrader ARGS` in `course`, run as the grader runs it (output in the result's stdout)."""
    from coursekit.grading.grade import run_nbgrader

    return run_nbgrader(course, list(args), {}, timeout=3600)


def course_copy(tmp: Path, assignment: str, notebooks: list[Path] | None = None) -> Path:
    """A scratch course directory holding the source of one assignment (or some of its
    notebooks), with the student version generated."""
    shutil.copy(ROOT / "nbgrader_config.py", tmp / "nbgrader_config.py")
    dest = tmp / "solutions" / assignment
    dest.mkdir(parents=True)
    for nb in notebooks or sorted((ROOT / "solutions" / assignment).glob("*.ipynb")):
        shutil.copy(nb, dest / nb.name)
    result = nbgrader(tmp, "generate_assignment", assignment, "--force")
    assert result.returncode == 0, result.stdout
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
    """At least 4 graded tests, hidden tests, and for every task at least two known-wrong
    solutions and hints that climb (a nudge, then a stronger one) without giving the answer:
    no line of the solution appears in them, and no hint appears in the notebook itself."""
    from coursekit.learner.exercises import answer, tasks_of

    nb = nbformat.read(path, as_version=4)
    tests = cells_of(nb, "test")
    assert len(tests) >= 4, "at least 4 graded tests"
    assert any("BEGIN HIDDEN TESTS" in c.source for c in tests), "at least one hidden test"
    for cell in cells_of(nb, "solution"):
        if cell.cell_type == "code":
            assert "BEGIN SOLUTION" in cell.source, cell.source[:80]
    every_hint = []
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for task in tasks_of(path):
        assert len(task.hints) >= 2, f"{task.id}: two levels of hints"
        wrongs = cells[task.id].metadata.get("coursekit", {}).get("wrong", [])
        assert len(wrongs) >= 2, f"{task.id}: at least two known-wrong solutions (common mistakes)"
        body = answer(task).splitlines()[1:-1]  # the lines the learner writes
        lines = {re.sub(r"\s+", "", line) for line in body if len(line.strip()) >= 12}
        for hint in task.hints:
            flat = re.sub(r"\s+", "", hint)
            given = [line for line in lines if line.rstrip(";") in flat]
            assert not given, f"{task.id}: a hint gives the answer line {given}"
        every_hint += task.hints
    for cell in nb.cells:
        assert not any(h in cell.source for h in every_hint)


def shown(cell) -> dict[str, list]:
    """What nbval compares of a cell's outputs: each stream's text, each MIME type's data but
    images, an error's name and value (nothing where tagged `nbval-ignore-output`). A passing
    test's stderr is shown as stdout by the harness, so a test cell's streams count as one."""
    from coursekit.grading.harness import is_test

    found: dict[str, list] = {}
    if "nbval-ignore-output" in cell.metadata.get("tags", []):
        return found
    for out in cell.outputs:
        if out.output_type == "stream":
            name = "stdout" if is_test(cell) else out.name
            found.setdefault(name, [""])[0] += out.text
        elif out.output_type == "error":
            found.setdefault("error", []).append((out.ename, out.evalue))
        else:
            for mime, data in out.get("data", {}).items():
                if not mime.startswith("image/"):
                    found.setdefault(mime, []).append(data)
    return found


def reproduces(new: dict[str, list], old: dict[str, list]) -> bool:
    """`shown` outputs equal, texts up to floating-point noise (as nbval's, in conftest.py)."""
    from coursekit.content.float_noise import same_text

    def same(a, b) -> bool:
        return a == b or (isinstance(a, str) and isinstance(b, str) and same_text(b, a))

    return new.keys() == old.keys() and all(
        len(new[k]) == len(old[k]) and all(map(same, new[k], old[k])) for k in old
    )


@pytest.mark.full
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_exercise_scores_full_marks_solved(tmp_path, path):
    """nbgrader's own autograde of the reference solution: every test at full marks, and
    every cell shows the output committed in solutions/ (nbval runs course/ only: this run
    checks the solutions' outputs, as nbval would)."""
    assignment = path.parent.name
    course = course_copy(tmp_path, assignment, [path])
    dest = course / "submitted" / "solved" / assignment
    dest.mkdir(parents=True)
    nb = nbformat.read(course / "solutions" / assignment / path.name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(nb, dest / path.name)
    result = nbgrader(course, "autograde", assignment, "--force")
    assert result.returncode == 0, result.stdout

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        solved = gb.find_submission_notebook(path.stem, assignment, "solved")
        assert solved.max_score > 0
        failed = [g.name for g in solved.grades if g.score != g.max_score]
        assert solved.score == solved.max_score, f"the solution lost points on {failed}"
    graded = nbformat.read(course / "autograded" / "solved" / assignment / path.name, as_version=4)
    committed = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    ran = [c for c in graded.cells if c.cell_type == "code"]
    assert len(ran) == len(committed)
    for number, (new, old) in enumerate(zip(ran, committed, strict=True), 1):
        assert reproduces(shown(new), shown(old)), f"code cell {number}: other outputs:\n{old.source}"


@pytest.mark.full
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_unsolved_and_known_wrong_solutions_fail(tmp_path, path):
    """In one kernel, task by task as the harness of graded runs judges them: the released
    stub fails the task's tests, so does each known-wrong solution (which must itself run
    without error: a mistake, not a syntax error), and then the reference solution passes.

    A candidate and its task's tests run as one cell (one compile instead of two), each test
    in its own harness after the candidate's code: where every test then has a verdict (its
    proof or the harness's report of its failure), the candidate's code ran to its end and
    the verdicts are those of graded runs. Otherwise (a compile error, the candidate's own
    code failing) the candidate runs alone and its tests after it, as graded runs do."""
    from coursekit.grading.harness import arm, is_helpers, is_test, passed
    from coursekit.kernel.session import KernelSession
    from coursekit.learner.exercises import tasks_of, with_body

    source = nbformat.read(path, as_version=4)
    stubs = {
        c.metadata.nbgrader.grade_id: c.source
        for c in cells_of(
            nbformat.read(ROOT / "exercises" / path.parent.name / path.name, as_version=4), "solution"
        )
    }
    helpers = "\n".join(c.source for c in source.cells if c.cell_type == "code" and is_helpers(c))
    tests_of = {t.id: t.tests for t in tasks_of(path)}
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in source.cells}
    problems = []
    with KernelSession(cwd=tmp_path) as kernel:

        def judge(test_id: str) -> bool:
            ran = kernel.run(arm(cells[test_id].source, "n0nce", test_id, helpers), timeout=300)
            return passed([{"output_type": t, **c} for t, c in ran.outputs], "n0nce")

        def passing(test_ids: list[str]) -> set[str]:
            """The tests that pass. They run in one cell, each in its own harness (one compile
            instead of one per test); a cell that fails otherwise than by a test's panic (a
            compile error, a lost kernel) is judged again test by test, as graded runs do."""
            armed = "\n".join(arm(cells[t].source, "n0nce", t, helpers) for t in test_ids)
            ran = kernel.run(armed, timeout=300)
            if any(t == "error" and c.get("ename") != "RustPanic" for t, c in ran.outputs):
                return {t for t in test_ids if judge(t)}
            return {proven for t, c in ran.outputs if (proven := proof_of(c, "n0nce")) in test_ids}

        def tried(code: str, test_ids: list[str]) -> tuple[str | None, set[str]]:
            """The error of `code` (None: it ran), and the tests that pass after it."""
            armed = "\n".join(arm(cells[t].source, "n0nce", t, helpers) for t in test_ids)
            verdicts = judged(kernel.run(code + "\n" + armed, timeout=300), test_ids)
            if verdicts is not None:
                return None, verdicts
            alone = kernel.run(code, timeout=300)
            return (None if alone.ok else alone.error), passing(test_ids)

        def candidates(cell) -> None:
            gid = cell.metadata.nbgrader.grade_id
            wrongs = cell.metadata.get("coursekit", {}).get("wrong", [])
            for why, body in [("the stub", None)] + [(w["why"], w["code"]) for w in wrongs]:
                code = stubs[gid] if body is None else with_body(cell.source, body)
                error, scoring = tried(code, tests_of[gid])
                if body is not None and error:
                    problems.append(f"{gid}: the wrong solution {why!r} does not run: {error}")
                if scoring:  # a wrong answer scores 0 on its task: none of its tests passes
                    problems.append(f"{gid}: {why!r} passes {sorted(scoring)}")
            error, scoring = tried(cell.source, tests_of[gid])
            assert not error, f"{gid}: the reference solution does not run: {error}"
            failing = sorted(set(tests_of[gid]) - scoring)
            assert not failing, f"{gid}: the reference solution fails {failing}"

        pending = None  # the answer cell whose tests come next
        for cell in source.cells:
            if cell.cell_type != "code":
                continue
            if is_test(cell):
                if pending is not None:
                    candidates(pending)
                    pending = None
                continue
            if cell.metadata.get("nbgrader", {}).get("solution"):
                pending = cell  # not run yet: as in a learner's kernel, the stub comes first
                continue
            ran = kernel.run(cell.source, timeout=900)
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            assert ran.ok, f"{gid}: {ran.error}"
    assert not problems, "\n".join(problems)


def judged(ran, test_ids: list[str]) -> set[str] | None:
    """The tests that passed in a cell that ran them in their harnesses after other code;
    None unless each has a verdict: a proof, or the harness's report of its failure."""
    passed = {proven for _, c in ran.outputs if (proven := proof_of(c, "n0nce")) in test_ids}
    stderr = "".join(c["text"] for t, c in ran.outputs if t == "stream" and c.get("name") == "stderr")
    failed = {t for t in test_ids if re.search(rf"\btest {re.escape(t)} (failed|returned an error)", stderr)}
    errors = [c.get("ename") for t, c in ran.outputs if t == "error"]
    if passed | failed != set(test_ids) or any(e != "RustPanic" for e in errors):
        return None
    return passed


def proof_of(content: dict, nonce: str) -> str | None:
    """The test whose harness proof, for `nonce`, this output is."""
    from coursekit.grading.harness import PASS_MIME, proof

    return json.loads(content["data"][PASS_MIME])["test"] if proof(content, nonce) else None


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_released_notebooks_hold_no_hints_or_wrong_solutions(assignment):
    """Students get the release: hints (`coursekit hint`) and known-wrong solutions stay in
    the instructor's source."""
    for path in sorted((ROOT / "exercises" / assignment).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("coursekit", {})
            assert "hint" not in meta and "wrong" not in meta, f"{path.name}: {cell.metadata}"
