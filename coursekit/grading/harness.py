"""Running an exercise notebook so that a test's points mean its code ran to its end.

`GradedExecute` replaces nbgrader's `Execute` in `coursekit grade`, `coursekit check` and
nbgrader's Validate (nbgrader_config.py), so the three reach the same verdict:

- Each test cell runs inside the prelude's `grading::test` harness (a `catch_unwind`, so a
  panic counts whatever panic hook the student installed), with the notebook's test
  helpers (cells tagged `coursekit.test_helpers`) copied into it as local items, which a
  student's redefinition of the same names cannot replace. Test cells call assertion
  macros by absolute path (`::core::assert_eq!`; tests/test_structure.py keeps the rule).
- The harness's proof of success carries a secret made for this run; a test scores only if
  its cell shows that proof and no error. The judge is this process, outside the kernel.
- A kernel that dies, or a cell that loses the Rust state (a timeout, a crash of evcxr),
  costs only that cell: a fresh kernel replays the cells before it (tests excepted) and
  the notebook goes on.
- A cell's output is capped in bytes, whatever form it takes.
- `coursekit watch` may hand over a kernel it started before the check (KERNEL_AHEAD): the
  notebook runs in it first. Only the learner's own check does; graded runs never.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
import time
from pathlib import Path

from nbclient.exceptions import DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer, default

from ..kernel.outputs import FORGED, UNAVAILABLE, UNAVAILABLE_NAME
from ..kernel.session import KERNEL_TRIES, OOM_FIRST, attach, start_retrying

KERNEL_AHEAD = "COURSEKIT_KERNEL_AHEAD"  # a KernelAhead's handoff file
PASS_MIME = "application/x-coursekit-test-passed"  # also in the prelude (grading::PASS_MIME)
HIDDEN_BEGIN = "// BEGIN HIDDEN TESTS"
LOST_STATE = ("CellTimeoutError", "KeyboardInterrupt", "RustProcessExited", "EvcxrCrash", "EvcxrKilled")


def nbgrader_meta(cell) -> dict:
    meta = cell.get("metadata")
    nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
    return nbg if isinstance(nbg, dict) else {}


def is_test(cell) -> bool:
    nbg = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(nbg.get("grade")) and not nbg.get("solution")


def is_helpers(cell) -> bool:
    return bool(cell.get("metadata", {}).get("coursekit", {}).get("test_helpers"))


def arm(source: str, nonce: str, name: str, helpers: str = "") -> str:
    """The test cell's Rust code inside the harness. Its lines keep their numbers (the
    harness opens on the first line); the helpers follow the test as local items. (Test
    cells are Rust: tests/test_structure.py keeps it so.)"""
    lines = [
        "::coursekit_prelude::grading::hidden(); " + line if line.strip() == HIDDEN_BEGIN else line
        for line in source.split("\n")
    ]
    # `{` first: evcxr takes a line that starts with `:` before any Rust code for a command.
    head = (
        f'{{::coursekit_prelude::grading::test("{nonce}", "{name}", || -> ::core::result::Result<(), '
        "::coursekit_prelude::grading::Failure> { "
    )
    return head + "\n".join(lines) + "\n;\n" + helpers + "\n::core::result::Result::Ok(())\n});};"


def proof(out: dict, nonce: str) -> bool:
    """This output is the harness's proof, for this run's secret, that a test ran to its end."""
    with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError, RecursionError):
        return json.loads(out.get("data", {})[PASS_MIME]).get("nonce") == nonce
    return False


def passed(outputs: list[dict], nonce: str) -> bool:
    """A test passed: its cell shows the proof and no error."""
    return any(proof(o, nonce) for o in outputs) and not any(o.get("output_type") == "error" for o in outputs)


def _output_bytes(content: dict) -> int:
    if "text" in content:
        return len(content["text"])
    data = content.get("data", {})
    return sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in data.values())


class _StateLost(Exception):
    """A cell ended with the Rust state gone (timeout, crash of evcxr)."""


class GradedExecute(Execute):
    notebook_timeout = Integer(
        900, help="seconds for the whole notebook; cells after it get 0 with a message"
    ).tag(config=True)
    max_restarts = Integer(6, help="fresh kernels after crashes, at most").tag(config=True)
    max_cell_output = Integer(256 * 1024, help="bytes of output kept per cell").tag(config=True)

    @default("shutdown_kernel")
    def _kill_when_done(self):  # its cells are done: waiting for it to exit cost a check 0.9 s
        return "immediate"

    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        armed = self._arm(nb)
        self._output_sizes: dict[int, int] = {}
        self.events: list[str] = []
        self.seconds = {"kernel start": 0.0, "first cell": 0.0, "other cells": 0.0}
        self._armed = armed
        self._run(nb, set(armed))
        self._judge(nb, armed)
        if os.environ.get("COURSEKIT_EVENTS"):  # the grader's record of what happened, and when
            report = {"events": self.events, "seconds": {k: round(v, 2) for k, v in self.seconds.items()}}
            Path(os.environ["COURSEKIT_EVENTS"]).write_text(json.dumps(report))
        return nb, self.resources

    def _progress(self, what: str) -> None:
        """A line for `coursekit check` to show while the notebook runs (COURSEKIT_PROGRESS)."""
        if os.environ.get("COURSEKIT_PROGRESS"):
            with open(os.environ["COURSEKIT_PROGRESS"], "a") as f:
                f.write(what + "\n")

    def _tested(self, nb, index: int) -> None:
        if index in self._armed:
            verdict = "passed" if passed(nb.cells[index].outputs, self._armed[index][1]) else "failed"
            self._progress(f"{nbgrader_meta(nb.cells[index]).get('grade_id', 'test')} {verdict}")

    def _event(self, nb, index: int, what: str) -> None:
        gid = nbgrader_meta(nb.cells[index]).get("grade_id")
        self.events.append(f"{what} (cell {gid or f'{index + 1}, one of your own'})")

    # -- the harness ---------------------------------------------------------------------
    def _arm(self, nb) -> dict[int, tuple[str, str]]:
        """Wrap every test cell; cell index -> (its source, its secret)."""
        helpers = "\n".join(c.source for c in nb.cells if c.cell_type == "code" and is_helpers(c))
        armed = {}
        for index, cell in enumerate(nb.cells):
            if is_test(cell) and cell.source.strip():
                nonce = secrets.token_hex(16)
                armed[index] = (cell.source, nonce)
                cell.source = arm(cell.source, nonce, nbgrader_meta(cell).get("grade_id", "test"), helpers)
        return armed

    def _judge(self, nb, armed: dict[int, tuple[str, str]]) -> None:
        """A test passed if its cell shows this run's proof and no error; put the sources back."""
        for index, (source, nonce) in armed.items():
            cell = nb.cells[index]
            cell.source = source
            proven, outputs = passed(cell.outputs, nonce), []
            for out in cell.outputs:
                data = out.get("data", {})
                if PASS_MIME in data:
                    data = {k: v for k, v in data.items() if k != PASS_MIME}
                    if not data:
                        continue
                    out = NotebookNode({**out, "data": data})
                if out.get("output_type") == "execute_result":
                    # A test cell's code ends with `;`: a result can only be written by code
                    # that imitates evcxr's output markers (nbgrader would read it as a score).
                    out = _error(FORGED, "the test cell showed a result the harness did not make")
                outputs.append(out)
            errors = [o for o in outputs if o.output_type == "error"]
            failed = bool(errors)
            if failed:  # nbgrader scores by the first telling output: the error goes first
                outputs = errors + [o for o in outputs if o.output_type != "error"]
            elif proven:
                # What the student's code printed to stderr is shown, but the harness decides.
                outputs = [
                    NotebookNode({**o, "name": "stdout"}) if o.get("name") == "stderr" else o for o in outputs
                ]
            else:
                outputs.insert(
                    0,
                    _error(
                        "TestNotCompleted",
                        "the test did not run to its end: the grader saw no proof that it finished",
                    ),
                )
            cell.outputs = outputs

    # -- running, with fresh kernels after crashes ---------------------------------------
    def _run(self, nb, tests: set[int]) -> None:
        deadline = time.monotonic() + self.notebook_timeout
        skip: set[int] = set()  # cells that crashed: never replayed
        start, restarts = 0, 0
        while True:
            self._replaying = False
            self._current = start
            try:
                started = time.monotonic()
                with contextlib.ExitStack() as stack:
                    try:
                        ahead = self._start_kernel(stack)
                    except RuntimeError as exc:  # before any cell of the submission ran: ours
                        if restarts or "died before replying" not in str(exc):
                            raise
                        self._unavailable(nb, f"{exc} ({KERNEL_TRIES} tries)")
                        return
                    info = self.wait_for_reply(self.kc.kernel_info())
                    self.nb.metadata["language_info"] = info["content"]["language_info"]
                    self.seconds["kernel start"] += time.monotonic() - started
                    self._progress("kernel ready" if ahead else "kernel started")
                    self._replay(nb, start, skip | tests)
                    for index in range(start, len(nb.cells)):
                        self._current = index
                        cell = nb.cells[index]
                        if time.monotonic() > deadline and cell.cell_type == "code":
                            cell.outputs = [
                                _not_run(f"the notebook's {self.notebook_timeout} s were used up")
                            ]
                            continue
                        started = time.monotonic()
                        self.preprocess_cell(cell, self.resources, index)
                        if cell.cell_type == "code":
                            first = not any(self.seconds[k] for k in ("first cell", "other cells"))
                            took = time.monotonic() - started
                            self.seconds["first cell" if first else "other cells"] += took
                        start = index + 1
                        self._tested(nb, index)
                        lost = [
                            o.get("ename") for o in cell.get("outputs", []) if o.get("ename") in LOST_STATE
                        ]
                        if lost:
                            skip.add(index)
                            self._event(nb, index, f"{lost[0]}: the cells after it ran in a fresh kernel")
                            raise _StateLost
                return
            except (DeadKernelError, _StateLost) as exc:
                index = self._current
                skip.add(index)
                if isinstance(exc, DeadKernelError) and not self._replaying:
                    self._event(nb, index, "the kernel died: the cells after it ran in a fresh one")
                    nb.cells[index].outputs.append(
                        _error(
                            "KernelDied",
                            "the kernel died while running this cell; the next cells run in a fresh one",
                        )
                    )
                    start = index + 1
                restarts += 1
                self.km, self.kc = None, None
                if restarts > self.max_restarts:
                    for cell in nb.cells[start:]:
                        if cell.cell_type == "code":
                            cell.outputs = [_not_run(f"the kernel died {restarts} times")]
                    return

    @staticmethod
    def _unavailable(nb, why: str) -> None:
        """No kernel could start: the first code cell says so in the words the grader reads as
        its own fault (grade.kernel_unavailable), not as a score of 0; no cell runs."""
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        for cell in code:
            cell.outputs = [_not_run("no kernel started")]
        if code:
            code[0].outputs = [_error(UNAVAILABLE_NAME, f"{UNAVAILABLE}: {why}")]

    def _start_kernel(self, stack: contextlib.ExitStack) -> bool:
        """A kernel: the one started ahead, the first time and if it is still alive; else a
        fresh one, started again on fresh ports if it dies before it answers. True: ahead."""
        ahead = os.environ.pop(KERNEL_AHEAD, "")
        km = attach(ahead, self.kernel_name or self.nb.metadata.kernelspec.name) if ahead else None
        if km is not None:
            self.km, self.kc = km, None
            stack.enter_context(self.setup_kernel())
            return True

        def start():
            self.km, self.kc = None, None  # nbclient makes new ones, with new ports
            stack.enter_context(self.setup_kernel(env={**os.environ, OOM_FIRST: "1"}))

        start_retrying(start)
        return False

    def _replay(self, nb, upto: int, skip: set[int]) -> None:
        """Rebuild the state of cells [0, upto) in a fresh kernel, keeping their outputs."""
        self._replaying = True
        for index in range(upto):
            cell = nb.cells[index]
            if cell.cell_type == "code" and index not in skip:
                self._current = index
                self.execute_cell(copy.deepcopy(cell), index, store_history=False)
        self._replaying = False

    def output(self, outs, msg, display_id, cell_index):
        """Keep at most max_cell_output bytes of a cell's output, whatever its form."""
        used = self._output_sizes.get(cell_index, 0)
        size = _output_bytes(msg.get("content", {}))
        if used >= self.max_cell_output:
            return None
        self._output_sizes[cell_index] = used + size
        if used + size > self.max_cell_output:
            self._event(self.nb, cell_index, f"output cut at {self.max_cell_output} bytes")
            note = f"[output cut: this cell printed more than {self.max_cell_output} bytes]\n"
            content = msg["content"]
            if "text" in content:
                msg = {**msg, "content": {**content, "text": content["text"][: self.max_cell_output - used]}}
                super().output(outs, msg, display_id, cell_index)
            outs.append(NotebookNode({"output_type": "stream", "name": "stdout", "text": "\n" + note}))
            return None
        return super().output(outs, msg, display_id, cell_index)


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(
        {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
    )


def _not_run(why: str) -> NotebookNode:
    return _error("NotRun", f"not run: {why}")
