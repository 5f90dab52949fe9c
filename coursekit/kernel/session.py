"""A kernel driven cell by cell over the Jupyter protocol: set-up's prewarm, doctor's probe,
the cheat-sheet's checks, bench and the tests all run Rust through it. Also a kernel started
ahead of a check, and how the grading harness, in another process, runs in it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import psutil
from jupyter_client.manager import AsyncKernelManager, KernelManager
from jupyter_client.provisioning import KernelProvisionerBase

WARM_UP = "COURSEKIT_WARM_UP"  # a notebook whose first cell's crates the kernel loads at start
OOM_FIRST = "COURSEKIT_OOM_FIRST"  # "1": where memory runs out, this kernel goes first (a check's)


class Ran(NamedTuple):
    """What one cell did: the execute_reply's content and the cell's outputs, in order."""

    reply: dict
    outputs: list[tuple[str, dict]]

    @property
    def ok(self) -> bool:
        return self.reply.get("status") == "ok" and not any(t == "error" for t, _ in self.outputs)

    def stream(self, name: str = "stdout") -> str:
        return "".join(c["text"] for t, c in self.outputs if t == "stream" and c["name"] == name)

    @property
    def error(self) -> str | None:
        """`ename: evalue` of the cell's error, if it failed."""
        for t, c in self.outputs:
            if t == "error":
                return f"{c.get('ename')}: {c.get('evalue')}"
        return None if self.ok else f"{self.reply.get('ename')}: {self.reply.get('evalue')}"


KERNEL_TRIES = 3


def start_retrying(start, tries: int = KERNEL_TRIES):
    """`start()` starts a kernel on the TCP ports Jupyter picked and waits for its first
    reply; when the kernel died before that reply, it runs again (new ports), up to `tries`
    times. Jupyter picks free ports, then the kernel binds them, and a process starting
    another kernel meanwhile may take one (`Address already in use`: seen once in a test run)."""
    for attempt in range(1, tries + 1):
        try:
            return start()
        except RuntimeError as exc:
            if "died before replying" not in str(exc) or attempt == tries:
                raise


def ipc_manager(name: str, spec_manager=None, manager_class=KernelManager):
    """A kernel manager that talks over Unix sockets in a short private directory (no TCP
    port, and no "running over TCP without encryption" warning), and that directory."""
    runtime = tempfile.mkdtemp(prefix="ck-")
    kwargs = {"kernel_spec_manager": spec_manager} if spec_manager else {}
    km = manager_class(kernel_name=name, transport="ipc", **kwargs)
    km.connection_file = os.path.join(runtime, "kernel.json")
    km.ip = os.path.join(runtime, "k")
    return km, runtime


class KernelSession:
    """A running kernel, talked to over Unix sockets in a short private directory (no TCP
    port, and no "running over TCP without encryption" warning in every log)."""

    def __init__(
        self,
        name: str = "rust-pytorch",
        cwd: Path | str | None = None,
        env: dict | None = None,
        spec_manager=None,
        startup_timeout: float = 300,
    ):
        self.km, self.runtime = ipc_manager(name, spec_manager)
        self.km.start_kernel(cwd=str(cwd or os.getcwd()), env={**os.environ, **(env or {})})
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=startup_timeout)
        except RuntimeError:
            self.close()
            raise

    def run(self, code: str, timeout: float = 600) -> Ran:
        """Execute one cell; its reply and outputs (status and echo messages left out)."""
        msg_id = self.kc.execute(code)
        outputs = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no result within {timeout} s for {code[:80]!r}")
            try:
                msg = self.kc.get_iopub_msg(timeout=min(left, 5))
            except queue.Empty:
                if not self.km.is_alive():
                    raise RuntimeError("the kernel died") from None
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            if msg["msg_type"] not in ("status", "execute_input"):
                outputs.append((msg["msg_type"], msg["content"]))
        return Ran(self.reply(msg_id, timeout=60), outputs)

    def wait_idle(self, msg_id: str, timeout: float = 60) -> None:
        """Until the kernel is idle after request `msg_id`. ipykernel replies to a failed cell
        before it aborts the requests queued behind it: one sent earlier would be aborted."""
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            if (
                msg["parent_header"].get("msg_id") == msg_id
                and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"
            ):
                return

    def reply(self, msg_id: str, timeout: float = 60) -> dict:
        while True:
            msg = self.kc.get_shell_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]

    def stdout(self, code: str, timeout: float = 600) -> str:
        """The cell's stdout; AssertionError if the cell failed."""
        ran = self.run(code, timeout)
        assert ran.ok, (ran.reply, ran.outputs)
        return ran.stream("stdout")

    def drain_iopub(self) -> None:
        while True:
            try:
                self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                return

    def close(self, now: bool = False) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=now)
        shutil.rmtree(self.runtime, ignore_errors=True)

    def __enter__(self) -> KernelSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class KernelAhead:
    """A `rust-pytorch` kernel started before it is needed. `coursekit watch` starts one after
    each verdict: while the learner edits, it loads the notebook's crates (the kernel's own
    warm-up, told the notebook by WARM_UP), and the next check runs in it instead of paying a
    fresh kernel's start (14-24 s with a framework). It runs in a private empty directory, as
    a graded notebook does; `handoff` is what `attach` reads in the grader's process."""

    def __init__(self, notebook: Path, env: dict):
        self.cwd = tempfile.mkdtemp(prefix="coursekit-ahead-")
        self.km, self.runtime = ipc_manager("rust-pytorch")
        try:
            self.km.start_kernel(cwd=self.cwd, env={**os.environ, **env, WARM_UP: str(notebook)})
            # the connection itself: a graded kernel removes its connection file once read
            info = self.km.get_connection_info()
            info["key"] = info["key"].decode()
            self.handoff = Path(self.runtime) / "ahead.json"  # in a directory only this user can read
            self.handoff.write_text(json.dumps({"connection": info, "pid": self.km.provisioner.pid}))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        with contextlib.suppress(Exception):  # it may have been shut down by the grader already
            self.km.shutdown_kernel(now=True)
        shutil.rmtree(self.cwd, ignore_errors=True)
        shutil.rmtree(self.runtime, ignore_errors=True)


class _Attached(KernelProvisionerBase):
    """The process of a kernel that another process started (a KernelAhead): signalled by its
    pid, seen as ended once it is a zombie that its parent has yet to reap."""

    def __init__(self, pid: int, **kwargs):
        super().__init__(**kwargs)
        self.pid = pid

    @property
    def has_process(self) -> bool:
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    async def poll(self) -> int | None:
        return None if self.has_process else 0

    async def wait(self) -> int | None:
        while self.has_process:
            await asyncio.sleep(0.05)
        return 0

    async def send_signal(self, signum: int) -> None:
        with contextlib.suppress(OSError):  # its process group, as jupyter_client signals its own
            os.killpg(os.getpgid(self.pid), signum)

    async def kill(self, restart: bool = False) -> None:
        await self.send_signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        await self.send_signal(signal.SIGTERM)

    async def launch_kernel(self, cmd, **kwargs):
        raise RuntimeError("a kernel started by another process is not launched again")

    async def cleanup(self, restart: bool = False) -> None:
        pass


def attach(handoff: str | Path, kernel_name: str) -> AsyncKernelManager | None:
    """A kernel manager for the running kernel a KernelAhead handed off (nbclient then only
    connects a client), or None when that kernel is gone or its handoff cannot be read. The
    handoff, which holds the key that signs the kernel's messages, is removed once read."""
    try:
        info = json.loads(Path(handoff).read_text())
        Path(handoff).unlink()
        provisioner = _Attached(int(info["pid"]))
        if not provisioner.has_process:
            return None
        km = AsyncKernelManager(kernel_name=kernel_name)
        km.load_connection_info(info["connection"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    provisioner.kernel_spec = km.kernel_spec
    km.provisioner = provisioner
    return km
