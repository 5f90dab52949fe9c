"""The evcxr_jupyter kernel that runs the Rust cells of a `rust-pytorch` kernel.

It runs as a child process in its own process group, driven by a blocking client from
one worker thread, which waits on the client's sockets. The child dies with its parent
(PR_SET_PDEATHSIG), and shutdown kills its whole process group, so no evcxr, cargo or rustc
process outlives the kernel (on Linux; elsewhere only a shutdown, not a crash of the
kernel, takes them down).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import zmq
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import KernelManager

from .session import start_retrying

OUTPUT_TYPES = {"stream", "display_data", "update_display_data", "execute_result", "error", "clear_output"}
LIVENESS_CHECK_MS = 100  # while nothing arrives, check this often that evcxr is alive
SETTLE_LIMIT_S = 10  # the longest wait, after the cell's reply, for a line it printed
INTERRUPT_GRACE_S = 1.5  # after this, an interrupt that evcxr did not honour restarts it
STARTUP_TIMEOUT_S = 600  # evcxr compiles the prelude crate at its first start in a build directory
VALID_DEPS = "valid-deps"  # beside init.evcxr: the pinned `:dep` lines (EVCXR_VALID_DEPS, evcxr.patch)


class ChildRestarted(Exception):
    """The evcxr child was restarted during a cell: all Rust variables are gone. The reason:
    "interrupt", "killed" (SIGKILL from outside: the system, out of memory), or "crash"."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _die_with_parent():  # runs in the child between fork and exec
    if sys.platform != "linux":  # no prctl (macOS): shutdown() still kills the process group
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def kernels_dir() -> str:
    return os.path.join(sys.prefix, "share", "jupyter", "kernels")


def evcxr_argv(evcxr: str, in_slot: bool = True) -> list[str]:
    """How every evcxr kernel starts (this one's child, the `rust` kernelspec, the bench's
    bare one): evcxr_jupyter in a warm build directory (coursekit.setup.slots), or in its own."""
    slot = [sys.executable, "-m", "coursekit.setup.slots", "--"] if in_slot else []
    return [*slot, evcxr, "--control_file", "{connection_file}"]


def evcxr_spec(evcxr: str, display_name: str, in_slot: bool = True) -> KernelSpec:
    return KernelSpec(
        argv=evcxr_argv(evcxr, in_slot),
        language="rust",
        display_name=display_name,
        interrupt_mode="message",
        resource_dir=kernels_dir(),
    )


class _EvcxrSpec(KernelSpecManager):
    """evcxr_jupyter (COURSEKIT_EVCXR), in a warm build directory, with this kernel's env."""

    def get_kernel_spec(self, kernel_name, **kwargs):
        return evcxr_spec(os.environ.get("COURSEKIT_EVCXR", "evcxr_jupyter"), "evcxr")


class EvcxrChild:
    def __init__(self, log):
        self.log = log
        # One long-lived thread: PR_SET_PDEATHSIG fires when the *thread* that forked dies.
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="evcxr")
        self._km: KernelManager | None = None
        self._kc = None
        self._interrupted_at: float | None = None
        self.ready = self._worker.submit(self._start)

    # -- running work on the worker thread -------------------------------------------
    def submit(self, fn, *args):
        return self._worker.submit(self._when_ready, fn, *args)

    def _when_ready(self, fn, *args):
        self.ready.result()
        return fn(*args)

    # -- life cycle (worker thread) ---------------------------------------------------
    def _start(self):
        start_retrying(self._start_once)  # a port taken before evcxr bound it: new ports

    def _start_once(self):
        self._km = KernelManager(kernel_name="evcxr", kernel_spec_manager=_EvcxrSpec())
        self.stderr_log = tempfile.TemporaryFile()  # noqa: SIM115 (no name: nothing left if we are killed)
        self._km.start_kernel(preexec_fn=_die_with_parent, stdout=self.stderr_log, stderr=self.stderr_log)
        try:
            self._connect()
        except RuntimeError as exc:
            if self._kc is not None:
                self._kc.stop_channels()
            raise RuntimeError(f"{exc}; evcxr said: {self.stderr_tail()}") from None

    def stderr_tail(self, n: int = 2000) -> str:
        """The end of what evcxr wrote to stderr (its own errors, cargo's progress)."""
        fd = self.stderr_log.fileno()
        end = os.fstat(fd).st_size
        return os.pread(fd, n, max(end - n, 0)).decode(errors="replace").strip()

    def _connect(self):
        self._kc = self._km.client()
        self._kc.start_channels()
        self._kc.wait_for_ready(timeout=STARTUP_TIMEOUT_S)
        # evcxr has read it: nothing else needs the key that signs its messages
        with contextlib.suppress(OSError):
            os.unlink(self._km.connection_file)

    def _restart(self):
        self._kc.stop_channels()
        self._km.restart_kernel(now=True)
        self._connect()

    def shutdown(self):
        """Kill evcxr and everything it started (its process group); from any thread."""
        self._worker.shutdown(wait=False, cancel_futures=True)
        km = self._km
        if km is None:
            return
        pgid = km.provisioner.pgid if km.provisioner else None
        if self._kc is not None:
            self._kc.stop_channels()
        km.shutdown_kernel(now=True)
        if pgid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)

    # -- requests (worker thread) -----------------------------------------------------
    def request(self, msg_type: str, content: dict, timeout: float = 30) -> dict:
        """Send a shell request (complete, inspect) and return the reply's content."""
        msg = self._kc.session.msg(msg_type, content)
        self._kc.shell_channel.send(msg)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                reply = self._kc.get_shell_msg(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                break
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return reply["content"]
        raise TimeoutError(f"evcxr did not answer a {msg_type} in {timeout} s")

    def execute(self, code: str, emit, silent: bool = False, settled=lambda: True) -> dict:
        """Run `code`, pass each output message to `emit(msg_type, content)` in order and
        return the execute_reply content once evcxr said the cell is done and `settled()`
        (every line the cell printed has come: evcxr relays stdout from another thread).
        Waits on both sockets at once, no polling. Raises ChildRestarted when evcxr died or
        an interrupt had to restart it."""
        kc = self._kc
        self._interrupted_at = None
        msg_id = kc.execute(code, silent=silent, store_history=not silent, stop_on_error=False)
        poller = zmq.Poller()
        poller.register(kc.shell_channel.socket, zmq.POLLIN)
        poller.register(kc.iopub_channel.socket, zmq.POLLIN)
        reply, idle_at, checked_at = None, None, time.monotonic()
        while True:
            ready = dict(poller.poll(LIVENESS_CHECK_MS))
            if time.monotonic() - checked_at > LIVENESS_CHECK_MS / 1000:
                self._check_alive()
                checked_at = time.monotonic()
            if kc.shell_channel.socket in ready:
                msg = kc.shell_channel.get_msg(timeout=0)
                if msg["parent_header"].get("msg_id") == msg_id:
                    reply = msg["content"]
            if kc.iopub_channel.socket in ready:
                msg = kc.iopub_channel.get_msg(timeout=0)
                if msg["parent_header"].get("msg_id") == msg_id:
                    msg_type = msg["msg_type"]
                    if msg_type == "status" and msg["content"]["execution_state"] == "idle":
                        idle_at = time.monotonic()
                    elif msg_type in OUTPUT_TYPES:
                        emit(msg_type, msg["content"])
            if reply is not None and idle_at is not None:
                if settled():
                    return reply
                if time.monotonic() - idle_at > SETTLE_LIMIT_S:
                    self.log.warning("a line the cell printed did not arrive in %s s", SETTLE_LIMIT_S)
                    return reply

    def _check_alive(self):
        if not self._km.is_alive():
            process = self._km.provisioner.process if self._km.provisioner else None
            killed = process is not None and process.returncode == -signal.SIGKILL
            self.log.warning("evcxr %s; restarting it", "was killed" if killed else "stopped")
            self._restart()
            raise ChildRestarted("killed" if killed else "crash")
        t = self._interrupted_at
        if t is not None and time.monotonic() - t > INTERRUPT_GRACE_S:
            self.log.warning("evcxr ignored an interrupt; restarting it")
            self._restart()
            raise ChildRestarted("interrupt")

    # -- from the kernel's main thread -------------------------------------------------
    def interrupt(self):
        """Ask evcxr to stop the running cell (it kills its runner process)."""
        if self._km is None or not self.ready.done():
            return
        self._interrupted_at = time.monotonic()
        # KernelManager's sync API starts its own event loop: keep it off the kernel's loop.
        threading.Thread(target=self._km.interrupt_kernel, daemon=True).start()
