"""The evcxr_jupyter build that `make` starts in the background while pip installs
(coursekit/setup/evcxr_build.py), against a stand-in `cargo` that records its builds:
set-up waits for a running build instead of starting a second one, and builds in the
foreground when the background one failed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from coursekit import pins
from coursekit.setup import evcxr_build

FAKE_CARGO = """#!/bin/bash
if [ "$1 $2" = "install --list" ]; then
    [ -f "$STATE/installed" ] && echo "evcxr_jupyter v$(cat "$STATE/installed"):"
    exit 0
fi
echo "$*" >> "$STATE/builds"
sleep "${BUILD_SECONDS:-0}"
if [ -f "$STATE/fail" ]; then rm "$STATE/fail"; echo "error: the build failed"; exit 101; fi
mkdir -p "$CARGO_HOME/bin" && touch "$CARGO_HOME/bin/evcxr_jupyter"
echo "$5" > "$STATE/installed"
"""


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A fresh machine: no evcxr_jupyter, an empty cache, the stand-in cargo first on PATH."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    (bin_dir / "cargo").write_text(FAKE_CARGO)
    (bin_dir / "cargo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo-home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("STATE", str(state))
    monkeypatch.setenv("BUILD_SECONDS", "3")
    return state


def start_background() -> subprocess.CompletedProcess:
    """What the Makefile runs before pip; it must return while the build goes on."""
    return subprocess.run(
        [sys.executable, "-m", "coursekit.setup.evcxr_build", "--background"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def builds(state) -> list[str]:
    path = state / "builds"
    return path.read_text().splitlines() if path.exists() else []


def test_setup_waits_for_the_background_build_instead_of_building_again(machine):
    started = time.monotonic()
    assert "building evcxr_jupyter in the background" in start_background().stdout
    assert time.monotonic() - started < 2.5, "make waited for the build"
    said = []
    assert evcxr_build.ensure(said.append) == evcxr_build.binary()
    assert builds(machine) == [f"install --locked evcxr_jupyter --version {pins.evcxr_version()}"]
    assert any("waiting for the evcxr_jupyter build" in s for s in said), said
    assert evcxr_build.installed_version() == pins.evcxr_version()
    # built: neither a second `make` nor set-up builds again
    assert start_background().stdout == ""
    evcxr_build.ensure(said.append)
    assert len(builds(machine)) == 1


def test_a_failed_background_build_is_built_again_in_the_foreground(machine):
    (machine / "fail").touch()
    start_background()
    said = []
    evcxr_build.ensure(said.append)
    assert len(builds(machine)) == 2
    assert any("the background build did not install it" in s for s in said), said
    assert evcxr_build.installed_version() == pins.evcxr_version()


def test_a_build_that_fails_in_the_foreground_is_a_clear_error(machine, monkeypatch):
    monkeypatch.setenv("BUILD_SECONDS", "0")
    (machine / "fail").touch()
    with pytest.raises(evcxr_build.BuildError, match="cargo install --locked evcxr_jupyter"):
        evcxr_build.ensure(lambda s: None)
