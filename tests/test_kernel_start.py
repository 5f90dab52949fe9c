"""A kernel that dies before its first reply, because another process took one of the TCP
ports Jupyter picked for it, is started again on new ports (coursekit.kernel.session's
start_retrying): in the grader (tests/test_grading_units.py), in nbval's notebook kernels
(conftest.py) and in the course kernel's evcxr child."""

from __future__ import annotations

import pytest

from conftest import ROOT
from coursekit.kernel.session import start_retrying

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
