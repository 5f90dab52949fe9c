"""Building evcxr_jupyter (`cargo install`: minutes of CPU on a fresh machine) under a lock, so
that the Makefile can start it in the background while pip fills the Python environment, and
`coursekit setup` then waits for that build instead of running a second one.

Standard library only: the Makefile runs `python3 -m coursekit.setup.evcxr_build --background`
with the system Python, before the virtual environment exists.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .. import pins
from .slots import cache_dir

LOCK, LOG = "evcxr-build.lock", "evcxr-build.log"


def binary() -> Path:
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    return cargo_home / "bin" / "evcxr_jupyter"


def installed_version() -> str | None:
    """The version `cargo install` recorded (evcxr_jupyter has no --version)."""
    if not binary().is_file():
        return None
    try:
        out = subprocess.run(
            ["cargo", "install", "--list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if line.startswith("evcxr_jupyter v"):
            return line.split()[1].lstrip("v").rstrip(":")
    return None


def command() -> list[str]:
    return ["cargo", "install", "--locked", "evcxr_jupyter", "--version", pins.evcxr_version()]


def _locked() -> int:
    """An fd holding the build lock (waits while another process builds)."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    fd = os.open(cache_dir() / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"[coursekit setup] waiting for the evcxr_jupyter build already running ({cache_dir() / LOG})")
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def ensure(log=print) -> Path:
    """evcxr_jupyter at the pinned version: built here, unless a build that holds the lock
    (started by the Makefile) finishes it first."""
    fd = _locked()
    try:
        if installed_version() != pins.evcxr_version():
            log(f"building evcxr_jupyter {pins.evcxr_version()} (about 10 minutes on 2 cores)")
            if subprocess.run(command()).returncode:
                raise RuntimeError(f"`{' '.join(command())}` failed; see its output above")
    finally:
        os.close(fd)
    return binary()


def background() -> None:
    """Start the build in a detached process that holds the lock (from before this returns)
    and writes to LOG; nothing when evcxr_jupyter is already at the pinned version or cargo
    is missing (`coursekit setup` then says what to do)."""
    if not shutil.which("cargo") or installed_version() == pins.evcxr_version():
        return
    fd = _locked()
    with open(cache_dir() / LOG, "w") as out:
        subprocess.Popen(
            command(), stdout=out, stderr=subprocess.STDOUT, pass_fds=[fd], start_new_session=True
        )
    os.close(fd)  # the child's copy keeps the lock until cargo exits
    print(f"[coursekit setup] building evcxr_jupyter in the background while pip runs ({cache_dir() / LOG})")


if __name__ == "__main__":
    if sys.argv[1:] != ["--background"]:
        sys.exit("usage: python3 -m coursekit.setup.evcxr_build --background")
    background()
