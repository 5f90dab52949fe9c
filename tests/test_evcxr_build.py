"""evcxr_jupyter built once: the Makefile's background build (started before the virtual
environment exists, with the system Python) holds a lock that `coursekit setup` waits on."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import ROOT

FAKE_CARGO = """#!/bin/sh
if [ "$1 $2" = "install --list" ]; then
    [ -f "$CARGO_HOME/bin/evcxr_jupyter" ] && echo "evcxr_jupyter v0.22.0:"
    exit 0
fi
mkdir -p "$CARGO_HOME" && echo "$@" >> "$CARGO_HOME/installs"
sleep 3
mkdir -p "$CARGO_HOME/bin" && touch "$CARGO_HOME/bin/evcxr_jupyter"
"""


def test_setup_waits_for_the_build_make_started_instead_of_building_twice(tmp_path):
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "cargo").write_text(FAKE_CARGO)
    (bin_dir / "cargo").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CARGO_HOME": str(tmp_path / "cargo"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }

    def python(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )

    started = time.monotonic()
    make = python("-S", "-m", "coursekit.setup.evcxr_build", "--background")  # -S: the standard library only
    assert make.returncode == 0, make.stderr
    assert time.monotonic() - started < 2.5, "make goes on to pip while cargo builds"
    assert "in the background" in make.stdout
    setup = python("-c", "from coursekit.setup import evcxr_build; print(evcxr_build.ensure())")
    assert setup.returncode == 0, setup.stderr
    assert "waiting for the evcxr_jupyter build already running" in setup.stdout
    assert (
        tmp_path / "cargo" / "installs"
    ).read_text() == "install --locked evcxr_jupyter --version 0.22.0\n"
    again = python("-S", "-m", "coursekit.setup.evcxr_build", "--background")
    assert again.stdout == "" and (tmp_path / "cargo" / "installs").read_text().count("\n") == 1
