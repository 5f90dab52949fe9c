"""Shared helpers: a kernel session driven over the Jupyter protocol."""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parent.parent


class KernelSession:
    """A running kernel; `run` executes one cell and returns (reply content, outputs)."""

    def __init__(self, name: str = "rust-pytorch", cwd: Path | None = None, env: dict | None = None):
        self.km, self.kc = start_new_kernel(
            kernel_name=name, startup_timeout=120, cwd=str(cwd or ROOT), env={**os.environ, **(env or {})}
        )

    def run(self, code: str, timeout: float = 600) -> tuple[dict, list[tuple[str, dict]]]:
        msg_id = self.kc.execute(code)
        outputs = []
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            if msg["msg_type"] not in ("status", "execute_input"):
                outputs.append((msg["msg_type"], msg["content"]))
        return self.reply(msg_id, timeout), outputs

    def reply(self, msg_id: str, timeout: float = 60) -> dict:
        while True:
            msg = self.kc.get_shell_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]

    def stdout(self, code: str) -> str:
        reply, outputs = self.run(code)
        assert reply["status"] == "ok", (reply, outputs)
        return "".join(c["text"] for t, c in outputs if t == "stream" and c["name"] == "stdout")

    def drain_iopub(self) -> None:
        while True:
            try:
                self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                return

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


@pytest.fixture(scope="module")
def kernel():
    session = KernelSession()
    yield session
    session.close()


def pytest_collection_modifyitems(config, items):
    """Notebook cells collected by nbval belong to the full tier, and each notebook runs on
    one xdist worker (its cells share a kernel)."""
    for item in items:
        if type(item).__name__ == "IPyNbCell":
            item.add_marker(pytest.mark.full)
