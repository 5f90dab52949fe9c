"""A learner's laptop need not run Linux: the Linux-only calls on the learner's path (the
kernel, `check`) are guarded. Grading stays Linux-only (bubblewrap, cgroups)."""

from __future__ import annotations

import ctypes
import sys
import types

import pytest

from coursekit.kernel import evcxr_child, kernel


class FakeLibc:
    def __init__(self):
        self.calls = []

    def prctl(self, *args):
        self.calls.append(args)


@pytest.fixture
def libc(monkeypatch):
    fake = FakeLibc()
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: fake)
    return fake


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_no_prctl_off_linux(monkeypatch, libc, platform):
    monkeypatch.setattr(sys, "platform", platform)
    evcxr_child._die_with_parent()
    app = types.SimpleNamespace(abs_connection_file="/nonexistent/kernel.json")
    path = list(sys.path)
    try:
        kernel._harden(app)
    finally:
        sys.path[:] = path
    assert libc.calls == []


def test_prctl_on_linux(monkeypatch, libc):
    monkeypatch.setattr(sys, "platform", "linux")
    evcxr_child._die_with_parent()
    assert libc.calls == [(1, 9)]  # PR_SET_PDEATHSIG, SIGKILL
