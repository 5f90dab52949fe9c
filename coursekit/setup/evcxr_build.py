"""Building evcxr_jupyter: `cargo install`, minutes of CPU on a fresh machine.

`make` starts the build in the background before it installs the Python packages
(`python -m coursekit.setup.evcxr_build --background`, the standard library only: the
virtual environment does not exist yet), so the two overlap; `coursekit setup` then waits for
it, and builds in the foreground when no build ran or the background one failed. A lock
keeps two builds from running at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .. import pins
from .slots import cache_dir, lock_file


class BuildError(RuntimeError):
    """`cargo install` failed (its output was shown)."""


def binary() -> Path:
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    return cargo_home / "bin" / "evcxr_jupyter"


def installed_version() -> str | None:
    """The version `cargo install` recorded (evcxr_jupyter has no --version)."""
    if not binary().is_file():
        return None
    try:
        listed = subprocess.run(["cargo", "install", "--list"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in listed.stdout.splitlines():
        if line.startswith("evcxr_jupyter v"):
            return line.split()[1].lstrip("v").rstrip(":")
    return None


def _command() -> list[str]:
    return ["cargo", "install", "--locked", "evcxr_jupyter", "--version", pins.evcxr_version()]


def _log_file() -> Path:
    return cache_dir() / "evcxr-build.log"


def _locked(wait: bool) -> int | None:
    cache_dir().mkdir(parents=True, exist_ok=True)
    return lock_file(cache_dir() / "evcxr-build.lock", wait)


def ensure(log) -> Path:
    """The pinned evcxr_jupyter, built (or waited for) when missing or another version."""
    fd = _locked(wait=False)
    if fd is None:
        log(f"waiting for the evcxr_jupyter build that started in the background (its output: {_log_file()})")
        fd = _locked(wait=True)
    try:
        if installed_version() != pins.evcxr_version():
            if _log_file().is_file():
                log(f"the background build did not install it; its output is in {_log_file()}")
            log(f"building evcxr_jupyter {pins.evcxr_version()} (about 6-10 minutes on 2 cores)")
            if subprocess.run(_command()).returncode:
                raise BuildError(f"`{' '.join(_command())}` failed; see its output above")
        _log_file().unlink(missing_ok=True)
    finally:
        os.close(fd)
    return binary()


def background() -> None:
    """Start the build in a detached process that holds the lock, and return once it does
    (at once when evcxr_jupyter is already built, another build runs, or cargo is missing)."""
    if not shutil.which("cargo") or installed_version() == pins.evcxr_version():
        return
    ready_r, ready_w = os.pipe()
    if os.fork():
        os.close(ready_w)
        if os.read(ready_r, 1):
            print(f"[coursekit setup] building evcxr_jupyter in the background: {_log_file()}", flush=True)
        return
    os.close(ready_r)
    os.setsid()  # neither make's end nor a Ctrl-C stops it; a later setup waits for it
    fd = _locked(wait=False)
    if fd is not None:
        os.write(ready_w, b"1")
    os.close(ready_w)
    if fd is None:
        os._exit(0)
    with open(os.devnull, "rb") as null, open(_log_file(), "wb") as out:
        for std, f in ((0, null), (1, out), (2, out)):
            os.dup2(f.fileno(), std)
    os._exit(subprocess.run(_command()).returncode)


if __name__ == "__main__":
    if sys.argv[1:] != ["--background"]:
        sys.exit("usage: python -m coursekit.setup.evcxr_build --background")
    background()
