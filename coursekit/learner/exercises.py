"""The course's exercises as tasks, read from the nbgrader sources in solutions/.

A task is a solution cell (its nbgrader grade_id is the task's stable id) with the test
cells that follow it up to the next solution cell, the markdown heading above it as its
title, its hints (cell metadata `coursekit.hint`: a nudge, then a stronger one) and the
known-wrong solutions the tests must reject (`coursekit.wrong`: `why` and `code`, the
lines between the solution markers). Task ids are unique within an assignment, so
`ASSIGNMENT/TASK` names a task whatever its notebook is called.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import nbformat

from ..pins import ROOT


@dataclass
class Task:
    assignment: str
    notebook: str  # file name
    id: str
    title: str
    hints: list[str]
    solution: str  # the source of the solution cell
    wrong: list[dict] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    points: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.assignment}/{self.id}"


def _nbg(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def tasks_of(source: Path) -> list[Task]:
    nb = nbformat.read(source, as_version=4)
    tasks: list[Task] = []
    title = ""
    for cell in nb.cells:
        nbg = _nbg(cell)
        if cell.cell_type == "markdown":
            heading = next(
                (line.lstrip("#").strip() for line in cell.source.splitlines() if line.startswith("#")), ""
            )
            title = heading or title
        elif nbg.get("solution") and cell.cell_type == "code":
            meta = cell.metadata.get("coursekit", {})
            hints = meta.get("hint", [])
            hints = [hints] if isinstance(hints, str) else list(hints)
            tasks.append(
                Task(
                    source.parent.name,
                    source.name,
                    nbg["grade_id"],
                    title,
                    hints,
                    cell.source,
                    meta.get("wrong", []),
                )
            )
        elif nbg.get("grade") and tasks:
            tasks[-1].tests.append(nbg["grade_id"])
            tasks[-1].points += float(nbg.get("points", 0))
    return tasks


@cache
def all_tasks() -> tuple[Task, ...]:
    """Every task of the course, in course order (assignment, notebook, cell)."""
    return tuple(t for src in sorted((ROOT / "solutions").glob("*/*.ipynb")) for t in tasks_of(src))


def find(name: str) -> Task:
    """A task by `ASSIGNMENT/TASK` or by its id alone when that is unambiguous."""
    matches = [t for t in all_tasks() if name in (t.key, t.id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise KeyError(f"no task named {name!r}; `coursekit progress` lists them")
    raise KeyError(f"{name!r} names several tasks: {', '.join(t.key for t in matches)}")


def exercise_path(task: Task) -> Path:
    return ROOT / "exercises" / task.assignment / task.notebook


def answer(task: Task) -> str:
    """The reference solution as a learner would write it: without nbgrader's markers."""
    return "\n".join(
        line for line in task.solution.splitlines() if not re.search(r"(BEGIN|END) SOLUTION", line)
    )


def with_body(source: str, body: str) -> str:
    """A solution cell's source with the lines between its markers replaced by `body`."""
    lines = source.split("\n")
    begin = next(i for i, line in enumerate(lines) if "BEGIN SOLUTION" in line)
    end = next(i for i, line in enumerate(lines) if "END SOLUTION" in line)
    return "\n".join(lines[: begin + 1] + body.split("\n") + lines[end:])


def lesson_of(task: Task) -> str:
    """The lesson an exercise notebook follows (its first markdown cell names it)."""
    first = nbformat.read(ROOT / "solutions" / task.assignment / task.notebook, as_version=4).cells[0].source
    found = re.search(r"`(course/[^`]+\.ipynb)`", first)
    return found.group(1) if found else "in course/"
