"""Reading a submitted notebook, rebuilding it on the released exercise, and flagging what
looks like an attack on the grader.

nbgrader restores the source of test cells a student edited, but grades a deleted test
cell as missing, a test cell moved above the code it tests as failing, a notebook that is
not valid JSON not at all, and an answer cell whose nbgrader metadata was edited as the
student wrote it. Before grading, the submission is rebuilt on the exercise: every cell of
the release in the release's order, with its released metadata — the student's source for
answer cells, the released source for all others — and the student's own extra Rust cells
after the cell they followed. The student's `%%python` cells are dropped: Python runs in
the kernel's own process, next to the code that reports results; so are the evcxr commands
(`:dep`, `:opt`, ...) and shell lines (`!`) of the student's cells: a `:dep` could put another
crate in the place of the prelude that reports the results. Each repair is reported to the
student.
"""

from __future__ import annotations

import copy
import json
import os
import re

import nbformat

from ..content.notebooks import KERNELSPEC, split_python
from .harness import is_test, nbgrader_meta

GRADING_KEYS = ("grade_id", "grade", "solution", "locked", "points", "task")


MAX_BYTES = 50 * 2**20  # a notebook larger than this is not read (a zip's entries too)


class InvalidSubmission(ValueError):
    """The file cannot be read as a notebook at all."""


def _grade_id(cell) -> str | None:
    gid = nbgrader_meta(cell).get("grade_id")
    return gid if isinstance(gid, str) else None


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source if isinstance(source, str) else ""


def read(path) -> nbformat.NotebookNode:
    try:
        with open(path, encoding="utf-8") as f:
            if os.fstat(f.fileno()).st_size > MAX_BYTES:
                raise ValueError(f"larger than {MAX_BYTES >> 20} MiB")
            raw = json.load(f)
        if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
            raise ValueError("no list of cells")
        raw["cells"] = [c for c in raw["cells"] if isinstance(c, dict)]
        return nbformat.from_dict(raw)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError, RecursionError) as exc:
        raise InvalidSubmission(f"not a readable Jupyter notebook ({type(exc).__name__}: {exc})") from None


def repair(submitted: nbformat.NotebookNode, released: nbformat.NotebookNode):
    """The submission rebuilt on the released exercise, and the list of repairs made."""
    notes: list[str] = []
    theirs = {}
    extras: dict[str | None, list] = {}  # student cells by the nbgrader cell they followed
    anchor = None
    released_ids = {_grade_id(c) for c in released.cells} - {None}
    for cell in submitted.get("cells", []):
        gid = _grade_id(cell)
        if gid is None or gid not in released_ids:  # the student's own cell
            if not isinstance(cell.get("metadata", {}), dict):
                notes.append("a cell had metadata that is not a JSON object: it was ignored")
            if cell.get("cell_type") != "code":
                continue  # text comes from the exercise
            if split_python(_source(cell)) is not None:
                notes.append("your own %%python cells were not run: graded runs execute Rust cells only")
                continue
            source, commands = without_commands(_source(cell))
            if commands:
                notes.append(_commands_note("a cell of your own", commands))
            extras.setdefault(anchor, []).append(_code_cell(source))
            continue
        if gid in theirs:
            notes.append(f"cell {gid} appears twice: the first copy was graded")
            continue
        theirs[gid] = cell
        anchor = gid

    order = [_grade_id(c) for c in released.cells]
    seen = [gid for gid in (_grade_id(c) for c in submitted.get("cells", [])) if gid in theirs]
    if seen != [gid for gid in order if gid in seen]:
        notes.append("cells were moved: they were put back in the exercise's order")
    cells = list(extras.get(None, []))
    for ref in released.cells:
        gid = _grade_id(ref)
        mine = theirs.get(gid)
        cell = copy.deepcopy(ref)  # released metadata, always
        if gid is not None and nbgrader_meta(ref).get("solution"):
            if mine is None:
                notes.append(f"your answer cell {gid} was deleted: the empty exercise cell was graded")
            else:
                if mine.get("cell_type") != ref.cell_type:
                    kind = mine.get("cell_type")
                    notes.append(f"cell {gid} was turned into {kind}: it was graded as {ref.cell_type}")
                if any(nbgrader_meta(mine).get(k) != nbgrader_meta(ref).get(k) for k in GRADING_KEYS):
                    notes.append(f"the nbgrader metadata of cell {gid} was changed: the exercise's was used")
                cell.source = _source(mine)
                if split_python(cell.source) is not None and split_python(ref.source) is None:
                    notes.append(
                        f"answer cell {gid} was turned into Python: it was graded as the exercise's Rust cell"
                    )
                    cell.source = ref.source
                cell.source, commands = without_commands(cell.source)
                if commands:
                    notes.append(_commands_note(f"cell {gid}", commands))
        elif gid is not None:
            if mine is None:
                notes.append(f"cell {gid} was deleted: it was restored")
            elif mine.get("cell_type") != ref.cell_type:
                notes.append(f"cell {gid} was turned into {mine.get('cell_type')}: it was restored")
        cells.append(cell)
        cells.extend(extras.get(gid, []) if gid is not None else [])
    nb = copy.deepcopy(released)
    nb.cells = cells
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    metadata = submitted.get("metadata") if isinstance(submitted.get("metadata"), dict) else {}
    kernelspec = metadata.get("kernelspec") if isinstance(metadata.get("kernelspec"), dict) else {}
    if kernelspec.get("name") != KERNELSPEC["name"]:
        notes.append("the notebook's kernel was changed: it was graded with the course kernel")
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    return nb, notes


# evcxr reads a cell's lines as commands until its first line of Rust (evcxr 0.22's
# code_block.rs): `:command args`, `!shell command`; blank lines and `//` comments between.
_COMMAND = re.compile(r" *:[^ ]*(?: +.*)?")


def without_commands(source: str) -> tuple[str, list[str]]:
    """The cell with its evcxr commands and shell lines blanked (line numbers stay), and
    those lines."""
    lines, commands = source.split("\n"), []
    for i, line in enumerate(lines):
        plain = line.rstrip("\r")
        if plain.startswith("!") or _COMMAND.fullmatch(plain):
            commands.append(plain.strip())
            lines[i] = ""
        elif not (plain.startswith("//") or not plain.strip()):
            break
    return "\n".join(lines), commands


def _commands_note(where: str, commands: list[str]) -> str:
    shown = ", ".join(f"`{c[:60]}`" for c in commands[:3]) + (", ..." if len(commands) > 3 else "")
    return f"{where}: evcxr commands and shell lines are not run in a graded run ({shown})"


def _code_cell(source: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source)


# -- flags for the instructor ----------------------------------------------------------------
SUSPICIOUS = [
    (r"\b(set_hook|take_hook|always_abort)\b", "replaces the panic hook"),
    (
        r"macro_rules!\s*(assert\w*|panic|vec|format|matches|debug_assert\w*|todo|unimplemented)\b",
        "defines a macro named like one of std's",
    ),
    (r"\bprocess\s*::\s*(exit|abort)\b|\blibc\b|\bextern\s+\"C\"", "exits the process or calls C directly"),
    (
        r"/proc\b|EVCXR|JUPYTER|lib\.rs|kernel-[\w-]{0,80}\.json",
        "reads the build or runtime directory, or /proc",
    ),
    (r"\bCommand\s*::\s*new\b|\bextern\s+crate\b", "starts programs or loads crates"),
    (r"\bunsafe\b|\basm!", "uses unsafe code"),
    (r"\bPartialEq\s*(?:<[^{};]{0,100}?>\s*)?for\b", "implements equality by hand"),
    (r"(?m)^ *:[a-z_]|^!", "writes evcxr commands or shell lines (not run when graded)"),
]
# Each pattern's cost grows with the cell's length times a bounded span, never with its square:
# the flags are read in the grader's own process, before any sandbox or time limit.
# Top-level names (a line's first column): what a cell defines for the cells after it.
_TO_RUST = re.compile(r"to_rust\(\s*[\"'](\w+)")  # variables a %%python cell binds in Rust
_ITEM = re.compile(
    r"^(?:pub\s+)?(?:fn|struct|enum|trait|static|const|type|mod|let(?:\s+mut)?|macro_rules!)\s+(\w+)", re.M
)


def review_flags(submitted: nbformat.NotebookNode, released: nbformat.NotebookNode) -> list[str]:
    """What in the student's code looks like an attack on the grader, for a person to
    review; flags never change a score."""
    flags = []
    ref = {_grade_id(c): c for c in released.cells if _grade_id(c)}
    locked_names = set()
    for c in released.cells:
        if c.cell_type == "code" and not nbgrader_meta(c).get("solution") and not is_test(c):
            locked_names |= set(_ITEM.findall(c.source)) | set(_TO_RUST.findall(c.source))
    for cell in submitted.cells:
        gid = _grade_id(cell)
        if cell.get("cell_type") != "code" or (gid in ref and not nbgrader_meta(ref[gid]).get("solution")):
            continue  # only the student's code: answer cells and their own cells
        where = f"cell {gid}" if gid else "a cell of your own"
        source = _source(cell)
        for pattern, what in SUSPICIOUS:
            if re.search(pattern, source):
                flags.append(f"{where} {what}")
        for name in sorted(set(_ITEM.findall(source)) & locked_names):
            flags.append(f"{where} redefines `{name}`, which a locked cell of the exercise defines")
        if gid in ref and not _keeps_scaffolding(source, ref[gid].source):
            flags.append(f"{where} changes the code the exercise gave around the answer (a signature?)")
    return list(dict.fromkeys(flags))


STUB_LINES = {"// YOUR CODE HERE", "todo!()", "# YOUR CODE HERE", "raise NotImplementedError()"}


def _keeps_scaffolding(mine: str, released: str) -> bool:
    """Every line the exercise gave around its `todo!()` is still there, in order."""
    given = [
        line.strip() for line in released.splitlines() if line.strip() and line.strip() not in STUB_LINES
    ]
    lines = iter(line.strip() for line in mine.splitlines())
    return all(any(line == g for line in lines) for g in given)
