"""Reading a submitted notebook and repairing it against the released exercise.

nbgrader restores the source of test cells a student edited, but grades a deleted test
cell as missing, a test cell moved above the code it tests as failing, and a notebook that
is not valid JSON not at all. Before grading, the submission is rebuilt on the exercise:
every nbgrader cell in the exercise's order — the student's version of solution cells, the
released version of every locked or test cell — with the student's own extra cells kept
after the cell they followed. Each repair is reported to the student.
"""

from __future__ import annotations

import copy
import json

import nbformat

from .notebooks import KERNELSPEC


class InvalidSubmission(ValueError):
    """The file cannot be read as a notebook at all."""


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_solution(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def read(path) -> nbformat.NotebookNode:
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        return nbformat.from_dict(raw) if raw.get("nbformat") == 4 else nbformat.reads(json.dumps(raw), 4)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError) as exc:
        raise InvalidSubmission(f"not a readable Jupyter notebook ({type(exc).__name__}: {exc})") from None


def repair(submitted: nbformat.NotebookNode, released: nbformat.NotebookNode):
    """The submission rebuilt on the released exercise, and the list of repairs made."""
    notes: list[str] = []
    theirs = {}
    extras: dict[str | None, list] = {}  # student cells by the nbgrader cell they followed
    anchor = None
    for cell in submitted.get("cells", []):
        gid = _grade_id(cell)
        if gid is None:  # the student's own cell: code is kept, text comes from the exercise
            if cell.get("cell_type") == "code":
                extras.setdefault(anchor, []).append(cell)
            continue
        if gid in theirs:
            notes.append(f"cell {gid} appears twice: the first copy was graded")
            continue
        theirs[gid] = cell
        anchor = gid

    cells = list(extras.get(None, []))
    order = [_grade_id(c) for c in released.cells]
    seen = [
        gid for gid in (_grade_id(c) for c in submitted.get("cells", [])) if gid is not None and gid in order
    ]
    if seen != [gid for gid in order if gid in seen]:
        notes.append("cells were moved: they were put back in the exercise's order")
    for ref in released.cells:
        gid = _grade_id(ref)
        mine = theirs.get(gid)
        if gid is not None and _is_solution(ref):
            if mine is None:
                notes.append(f"your answer cell {gid} was deleted: the empty exercise cell was graded")
                cell = copy.deepcopy(ref)
            else:
                cell = copy.deepcopy(mine)
                if cell.get("cell_type") != ref.cell_type:
                    kind = cell.get("cell_type")
                    notes.append(f"cell {gid} was turned into {kind}: it was graded as {ref.cell_type}")
                    cell = nbformat.from_dict({**ref, "source": cell.get("source", "")})
        else:
            if gid is not None and mine is None:
                notes.append(f"cell {gid} was deleted: it was restored")
            elif gid is not None and mine.get("cell_type") != ref.cell_type:
                notes.append(f"cell {gid} was turned into {mine.get('cell_type')}: it was restored")
            cell = copy.deepcopy(ref)
        cells.append(cell)
        cells.extend(extras.get(gid, []) if gid is not None else [])
    nb = copy.deepcopy(released)
    nb.cells = [nbformat.from_dict(c) for c in cells]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    if submitted.get("metadata", {}).get("kernelspec", {}).get("name") != KERNELSPEC["name"]:
        notes.append("the notebook's kernel was changed: it was graded with the course kernel")
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    return nb, notes
