"""A learner's laptop need not run Linux: the Linux-only calls on the learner's path (the
kernel, `check`) are guarded. Grading stays Linux-only (bubblewrap, cgroups) and says so;
set-up off Debian names no apt command."""

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


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_sandboxed_grading_off_linux_stops_with_the_way_out(monkeypatch, platform):
    from coursekit.grading import grade

    monkeypatch.setattr(sys, "platform", platform)
    with pytest.raises(grade.InputError, match=f"needs Linux .*not {platform}.*--no-sandbox"):
        grade.preflight(grade.Settings())
    assert "trusted notebooks only" in grade.preflight(grade.Settings(sandboxed=False))[0]


def test_missing_packages_off_debian_name_no_apt_command(monkeypatch, capsys):
    from coursekit.setup import install

    monkeypatch.setattr(sys, "platform", "darwin")
    real_which = install.shutil.which
    monkeypatch.setattr(install.shutil, "which", lambda cmd: None if cmd == "dpkg" else real_which(cmd))
    install.ensure_system_packages("tests")
    out = capsys.readouterr().out
    assert "apt-get" not in out and "Debian" not in out, out
    assert "bubblewrap is missing" in out and "Linux only" in out
    assert "mold is missing" in out and "your system's package manager (package `mold`)" in out


def test_a_package_removed_but_not_purged_counts_as_missing(tmp_path, monkeypatch):
    """`apt-get remove` leaves a package's configuration and a status (`dpkg -s` exits 0)."""
    from coursekit.setup import install

    fake = tmp_path / "dpkg-query"
    fake.write_text(
        '#!/bin/sh\ncase "$3" in\n  chromium) printf config-files ;;\n  mold) printf installed ;;\n'
        '  *) echo "dpkg-query: no packages found matching $3" >&2; exit 1 ;;\nesac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{install.os.environ['PATH']}")
    assert install._missing_debs(["chromium", "mold", "bubblewrap"]) == ["chromium", "bubblewrap"]
