"""A kernel that dies before its first reply, because another process took one of the TCP
ports Jupyter picked for it, is started again on new ports (coursekit.kernel.session's
start_retrying): in the grader (tests/test_grading_units.py), in nbval's notebook kernels
(conftest.py) and in the course kernel's evcxr child. And a kernel started ahead by one
process (`coursekit watch`) is attached to by another (the grading harness) only while it
lives, through a handoff read once."""

from __future__ import annotations

import pytest

from conftest import ROOT
from coursekit.kernel.session import _Attached, attach, start_retrying

DIED = "Kernel died before replying to kernel_info"


def test_only_a_kernel_that_died_before_replying_is_started_again():
    calls = []

    def dies(times: int, message: str = DIED):
        def start():
            calls.append(message)
            if len(calls) <= times:
                raise RuntimeError(message)
            return "kernel"

        return start

    assert start_retrying(dies(2)) == "kernel"
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(RuntimeError, match="died before replying"):
        start_retrying(dies(5))
    assert len(calls) == 3  # then it gives up
    calls.clear()
    with pytest.raises(RuntimeError, match="did not respond"):
        start_retrying(dies(1, "the kernel did not respond in 60 seconds"))
    assert len(calls) == 1  # another failure is not a port race


def test_nbval_starts_a_notebook_kernel_again_when_its_port_was_taken(port_taken_first, monkeypatch):
    import nbval.kernel

    manager_class, managers = port_taken_first
    monkeypatch.setattr(nbval.kernel, "KernelManager", manager_class)
    kernel = nbval.kernel.RunningKernel("python3", cwd=str(ROOT))
    try:
        assert kernel.is_alive()
    finally:
        kernel.stop()
    assert len(managers) == 2


def test_a_kernel_started_ahead_is_attached_only_while_it_lives(tmp_path):
    import asyncio
    import json
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    handoff = tmp_path / "ahead.json"
    connection = {"transport": "ipc", "ip": str(tmp_path / "k"), "shell_port": 1, "iopub_port": 2,
                  "stdin_port": 3, "control_port": 4, "hb_port": 5, "key": "secret",
                  "signature_scheme": "hmac-sha256"}  # fmt: skip
    try:
        handoff.write_text(json.dumps({"connection": connection, "pid": proc.pid}))
        km = attach(handoff, "rust-pytorch")
        assert km is not None and km.has_kernel and km.session.key == b"secret"
        assert not handoff.exists(), "the handoff holds the signing key: read once"
        assert attach(handoff, "rust-pytorch") is None
        handoff.write_text("not json")
        assert attach(handoff, "rust-pytorch") is None

        asyncio.run(km.provisioner.send_signal(signal.SIGTERM))  # its process group
        deadline = time.monotonic() + 10
        while km.has_kernel and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not km.has_kernel, "a zombie its parent has not reaped counts as ended"
        assert asyncio.run(km.provisioner.poll()) == 0
        handoff.write_text(json.dumps({"connection": connection, "pid": proc.pid}))
        assert attach(handoff, "rust-pytorch") is None, "a dead kernel is not attached"
    finally:
        proc.kill()
        proc.wait()
    assert not _Attached(proc.pid).has_process
