"""The `rust-pytorch` kernel: Rust cells run in evcxr, `%%python` cells in this IPython.

Start it with `python -m coursekit.kernel -f CONNECTION_FILE` (its kernelspec does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import hashlib
import importlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp

from .. import pins
from ..content.notebooks import LANGUAGE_INFO, split_python
from ..learner import memory
from . import values
from .evcxr_child import VALID_DEPS, ChildRestarted, EvcxrChild
from .outputs import LOST, UNAVAILABLE, UNAVAILABLE_NAME, CellOutputs, error_output
from .session import OOM_FIRST, WARM_UP

PANIC_HOOK = "coursekit_prelude::install_panic_hook();"  # also in prelude.rs
KILLED = (  # nothing in the kernel sends evcxr a SIGKILL while a cell runs
    "evcxr was killed (SIGKILL): most often the system stops the largest process when memory "
    "runs out; shutting down the kernels of notebooks you are not using frees memory. Then "
)
NOT_RUN = "Rust was still starting or loading the notebook's crates; your variables are kept"

# A front end a learner watches (JupyterLab names the kernel's notebook; nbval, nbgrader and
# the tests do not): a cell that waits shows what for, until its own output arrives.
INTERACTIVE = bool(os.environ.get("JPY_SESSION_NAME"))
STATUS_AFTER_S = 1.0  # a wait shorter than this shows nothing
COMPILING_AFTER_S = 5.0

# Graded runs (coursekit grade and check) set these: see _harden and do_execute.
GRADED = os.environ.get("COURSEKIT_GRADED") == "1"
LAZY_ANALYSIS = "EVCXR_LAZY_ANALYSIS"  # evcxr.patch: "1" indexes only when it must, "background" at once
ALLOWED_PYTHON = set(filter(None, os.environ.get("COURSEKIT_PYTHON_CELLS", "").split(",")))


def code_cells(notebook: str) -> list[str]:
    """The sources of a notebook's code cells (none if it cannot be read)."""
    try:
        cells = json.loads(Path(notebook).read_text())["cells"]
        return ["".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


class RustPyTorchKernel(IPythonKernel):
    implementation = "coursekit-rust-pytorch"
    implementation_version = "1.0"
    banner = "Rust (evcxr) cells, with %%python cells for the PyTorch reference code"
    language_info = dict(LANGUAGE_INFO, version=pins.rustc_version())

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rust = EvcxrChild(self.log)
        cells = code_cells(os.environ.get("JPY_SESSION_NAME") or os.environ.get(WARM_UP, ""))
        self._warm_up(next(iter(cells), ""))
        # a graded run's notebook has %%python cells when it allows some
        self.has_python = bool(ALLOWED_PYTHON) if GRADED else any(map(split_python, cells))
        self.preloaded: concurrent.futures.Future | None = None  # see preload_python
        self._pending_bindings: list[str] = []
        self.shell.user_ns["rust"] = values.SharedValues()
        self.shell.user_ns["to_rust"] = self._to_rust

    def _waiting_for(self, job) -> str | None:
        """What a submitted Rust cell waits for, in words, or None (it runs)."""
        if not self.rust.ready.done():
            return "the Rust kernel (evcxr) to start, a few seconds"
        if self.warmed is not None and not self.warmed.done() and not job.running():
            return "this notebook's crates, which load in the background (a minute or two the first time)"
        if job.running() and time.monotonic() - job.coursekit_started > COMPILING_AFTER_S:
            return "the cell to compile and run (a framework's first cell compiles for up to a minute)"
        return None

    def _warm_up(self, first_cell: str) -> None:
        """Load the notebook's crates while the learner reads its first cells.

        jupyter_server names the notebook a kernel serves (JPY_SESSION_NAME); `coursekit
        watch` names the one its kernel started ahead of the next check will run. Its first code
        cell's `:dep` lines are run in evcxr now, silently, and a variable is defined and
        dropped so that evcxr's analyzer indexes the crates too; when the learner runs that
        cell, evcxr finds it all done. Only `:dep` lines are run, never the learner's code.
        A check's kernel defines no variable: its analyzer is to index nothing (main()).
        """
        self.warmed = None
        deps = [line for line in first_cell.splitlines() if line.startswith(":dep ")]
        if deps and os.environ.get(LAZY_ANALYSIS) == "1":
            self.warmed = self.rust.submit(self.rust.execute, "\n".join(deps), lambda *_: None, True)
        elif deps:
            code = "\n".join(deps) + "\nlet coursekit_warm_up = String::new();"
            self.rust.submit(self.rust.execute, code, lambda *_: None, True)
            self.warmed = self.rust.submit(
                self.rust.execute, "drop(coursekit_warm_up);", lambda *_: None, True
            )

    def preload_python(self) -> None:
        """Import PyTorch in the background where the notebook has %%python cells (the course's
        import it, as show_versions does): the import (about 1.2 s of CPU) then overlaps
        evcxr's loading of the crates instead of delaying the first Python cell. Called at the
        first cell (the kernel answers kernel_info first, so the first cell reaches evcxr as
        soon as it can), after _harden (nothing is imported from the working directory);
        Python cells wait until it is done."""
        if self.preloaded is not None:
            return
        self.preloaded = concurrent.futures.Future()
        if not self.has_python:
            self.preloaded.set_result(None)
            return

        def run():
            try:
                importlib.import_module("torch")
            except Exception as exc:  # the cell that imports it shows the error
                self.log.warning("preloading torch failed: %s", exc)
            finally:
                self.preloaded.set_result(None)

        threading.Thread(target=run, name="preload", daemon=True).start()

    # -- Python -> Rust ---------------------------------------------------------------
    def _to_rust(self, name: str, value) -> None:
        """Bind `name` in the Rust session to `value` once this %%python cell is done."""
        self._pending_bindings.append(values.rust_binding(name, value))

    # -- execution ----------------------------------------------------------------------
    async def do_execute(
        self,
        code,
        silent,
        store_history=True,
        user_expressions=None,
        allow_stdin=False,
        *,
        cell_meta=None,
        cell_id=None,
    ):
        body = split_python(code)
        if body is None:
            job = asyncio.ensure_future(self._execute_rust(code, silent, store_history))
            await asyncio.sleep(0)  # the cell goes to evcxr first
            self.preload_python()
            return await job
        self.preload_python()
        if GRADED and hashlib.sha256(body.encode()).hexdigest() not in ALLOWED_PYTHON:
            error = error_output("RefusedCell", "in a graded run, only the exercise's own %%python cells run")
            return self._fail(error, self.shell.execution_count)
        await asyncio.wrap_future(self.preloaded)
        self._pending_bindings.clear()
        reply = await super().do_execute(
            body, silent, store_history, user_expressions, allow_stdin, cell_meta=cell_meta, cell_id=cell_id
        )
        if reply["status"] == "ok" and self._pending_bindings:
            bindings, self._pending_bindings = "\n".join(self._pending_bindings), []
            error = await self._run_rust(bindings, silent=True)
            if error:
                return self._fail(error, reply["execution_count"])
        return reply

    async def _execute_rust(self, code, silent, store_history):
        count = self.shell.execution_count
        if store_history and not silent:
            self.shell.execution_count += 1
        error = await self._run_rust(code, silent)
        if error:
            return self._fail(error, count)
        return {"status": "ok", "execution_count": count, "user_expressions": {}, "payload": []}

    async def _run_rust(self, code: str, silent: bool) -> dict | None:
        """Run Rust code in evcxr, publishing its outputs; return the error it ended with."""
        parent = self.get_parent("shell")
        outputs = CellOutputs(code=code)
        count = self.shell.execution_count - 1

        status = _Status(self, parent)

        def emit(msg_type, content):
            status.clear()  # the cell's own output replaces the waiting line
            for out_type, out in outputs.translate(msg_type, content):
                if out_type == "execute_result":
                    out = dict(out, execution_count=count)
                if not silent or out_type == "stream" and out["name"] == "stderr":
                    self.session.send(
                        self.iopub_socket, out_type, out, parent=parent, ident=self._topic(out_type)
                    )

        interrupted = False
        job = self.rust.submit(self.rust.execute, code, emit, silent, outputs.settled)
        job.coursekit_started = time.monotonic()
        shown = asyncio.ensure_future(status.show_while(job)) if INTERACTIVE and not silent else None

        def on_interrupt():
            nonlocal interrupted
            interrupted = True
            # A cell still queued (behind evcxr's start or the warm-up) is dropped; only a
            # running one needs evcxr to stop it.
            if not job.cancel():
                self.rust.interrupt()

        try:
            with self._on_sigint(on_interrupt):
                reply = await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            status.clear()
            if not job.cancelled():
                raise
            return error_output("KeyboardInterrupt", f"interrupted before it ran: {NOT_RUN}")
        except ChildRestarted as restarted:
            status.clear()
            if restarted.reason == "interrupt" or interrupted:
                return error_output("KeyboardInterrupt", "interrupted: " + LOST)
            if restarted.reason == "killed":
                return error_output("EvcxrKilled", KILLED + LOST)
            return error_output("EvcxrCrash", "evcxr stopped and was restarted: " + LOST)
        except Exception as exc:  # evcxr could not start: say why, keep the kernel alive
            status.clear()
            return {
                "ename": UNAVAILABLE_NAME,
                "evalue": f"{UNAVAILABLE}: {type(exc).__name__}: {exc}",
                "traceback": [f"Rust kernel unavailable: {exc!r}. Run `coursekit doctor`."],
            }
        finally:
            if shown is not None:
                shown.cancel()
        status.clear()
        for name, text in outputs.shared.items():
            try:
                self.shell.user_ns["rust"][name] = values.parse_debug(text)
            except ValueError as exc:
                self.log.warning("shared value %s not understood: %s", name, exc)
                self.shell.user_ns["rust"][name] = text
        error = outputs.outcome(reply.get("status", "ok"), interrupted)
        if error and error["evalue"].endswith(LOST):  # a fresh process runs the cells now
            await asyncio.wrap_future(self.rust.submit(self.rust.execute, PANIC_HOOK, lambda *_: None, True))
        return error

    def _fail(self, error: dict, count: int) -> dict:
        self.session.send(
            self.iopub_socket, "error", error, parent=self.get_parent("shell"), ident=self._topic("error")
        )
        return {"status": "error", "execution_count": count, **error}

    @contextlib.contextmanager
    def _on_sigint(self, callback):
        """Route SIGINT (Jupyter's interrupt) to `callback` while a Rust cell runs."""
        loop = asyncio.get_running_loop()
        saved = signal.signal(signal.SIGINT, lambda *_: loop.call_soon_threadsafe(callback))
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, saved)

    # -- completion and inspection --------------------------------------------------------
    async def do_complete(self, code, cursor_pos):
        body = split_python(code)
        if body is not None:
            offset = len(code) - len(body)
            reply = super().do_complete(body, max(cursor_pos - offset, 0))
            reply["cursor_start"] += offset
            reply["cursor_end"] += offset
            return reply
        return await self._ask_rust("complete_request", {"code": code, "cursor_pos": cursor_pos})

    async def do_inspect(self, code, cursor_pos, detail_level=0, omit_sections=()):
        body = split_python(code)
        if body is not None:
            offset = len(code) - len(body)
            return super().do_inspect(body, max(cursor_pos - offset, 0), detail_level, omit_sections)
        return await self._ask_rust(
            "inspect_request", {"code": code, "cursor_pos": cursor_pos, "detail_level": detail_level}
        )

    async def _ask_rust(self, msg_type: str, content: dict) -> dict:
        try:
            return await asyncio.wrap_future(self.rust.submit(self.rust.request, msg_type, content))
        except Exception as exc:
            self.log.warning("%s failed: %s", msg_type, exc)
            if msg_type == "complete_request":
                return {
                    "status": "ok",
                    "matches": [],
                    "cursor_start": content["cursor_pos"],
                    "cursor_end": content["cursor_pos"],
                    "metadata": {},
                }
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}

    async def do_is_complete(self, code):
        if split_python(code) is not None:
            return super().do_is_complete(split_python(code))
        return {"status": "complete"}

    # -- shutdown ----------------------------------------------------------------------
    async def do_shutdown(self, restart):
        started = time.monotonic()
        self.rust.shutdown()
        self.log.info("evcxr stopped in %.2f s", time.monotonic() - started)
        return super().do_shutdown(restart)


class _Status:
    """The line a waiting cell shows ("waiting for …, 12 s"), one display updated in place
    and cleared before the cell's own first output (or when it ends)."""

    def __init__(self, kernel: RustPyTorchKernel, parent):
        self.kernel, self.parent = kernel, parent
        self.lock = threading.Lock()
        self.state = "none"  # shown, then done; or done at once

    def _send(self, msg_type: str, content: dict) -> None:
        k = self.kernel
        k.session.send(k.iopub_socket, msg_type, content, parent=self.parent, ident=k._topic(msg_type))

    async def show_while(self, job) -> None:
        await asyncio.sleep(STATUS_AFTER_S)
        display = {"display_id": f"coursekit-wait-{id(self)}"}
        while not job.done():
            why = self.kernel._waiting_for(job)
            with self.lock:
                if self.state == "done":
                    return
                if why is not None:
                    seconds = time.monotonic() - job.coursekit_started
                    data = {"data": {"text/plain": f"⏳ waiting for {why}: {seconds:.0f} s"}, "metadata": {}}
                    kind = "display_data" if self.state == "none" else "update_display_data"
                    self._send(kind, {**data, "transient": display})
                    self.state = "shown"
            await asyncio.sleep(1.0)

    def clear(self) -> None:
        """From any thread: no more waiting line; remove the one shown."""
        with self.lock:
            if self.state == "shown":
                self._send("clear_output", {"wait": False})
            self.state = "done"


def _harden(app: IPKernelApp) -> None:
    """In a graded run, keep the student's Rust code away from this process, which runs the
    exercise's Python and reports results: the connection file (with the key that signs
    messages) is removed once read, the process cannot be read or traced by the cells'
    processes (same user), and Python imports nothing from the working directory, where
    the cells write."""
    with contextlib.suppress(OSError):
        os.unlink(app.abs_connection_file)
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]


def main():
    if GRADED or os.environ.get(OOM_FIRST) == "1":  # a check's kernel: check, Validate, grading
        # where memory runs out, this kernel's processes (evcxr, rustc) go first: a check or
        # Validate beside the learner's open notebooks never costs them their kernels. Before
        # initialize(), which may already start evcxr, so that it inherits the score.
        memory.volunteer()
        # Its cells declare their variables' types (tests run inside the harness's closure):
        # evcxr's rust-analyzer then never indexes the crates, which costs a framework's
        # kernel seconds and hundreds of MiB (evcxr.patch; bench/results.md).
        os.environ[LAZY_ANALYSIS] = "1"
    else:  # a learner's: a new crate graph is indexed in the background, while cells run
        os.environ.setdefault(LAZY_ANALYSIS, "background")
    # the course's pinned `:dep` lines (set-up writes them beside evcxr's init file): evcxr need
    # not check each with a `cargo metadata` of its own (evcxr.patch)
    listed = os.path.join(os.environ.get("EVCXR_CONFIG_DIR", ""), VALID_DEPS)
    os.environ.setdefault("EVCXR_VALID_DEPS", listed)
    app = IPKernelApp.instance(kernel_class=RustPyTorchKernel)
    app.initialize()
    if GRADED:
        _harden(app)
    app.start()
