"""Warm build directories for evcxr kernels.

evcxr builds each session's code in a fresh temporary directory, so every new kernel
re-runs the build scripts of its crates (for tch: a C++ compile of minutes). A kernel
started through `python -m coursekit.slots -- evcxr_jupyter ...` instead takes the first
free directory of a small pool (EVCXR_TMPDIR), locked for as long as that evcxr process
lives; the setup's prewarm step builds every framework once in each directory, so a
kernel's first cell only compiles the cell itself. When every directory is taken the
kernel gets a private temporary one (slower, but correct).
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

POOL_SIZE = int(os.environ.get("COURSEKIT_SLOTS", "2"))


def pool_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "coursekit" / "evcxr-slots"


def acquire(pool: Path | None = None, size: int = POOL_SIZE, only: int | None = None):
    """Lock the first free slot (or wait for slot `only`): (its directory, the locked fd),
    or None if all are busy."""
    pool = pool or pool_dir()
    pool.mkdir(parents=True, exist_ok=True)
    for n in range(size) if only is None else [only]:
        slot = pool / f"slot-{n}"
        slot.mkdir(exist_ok=True)
        fd = os.open(slot / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if only is not None else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            continue
        return slot, fd
    return None


def main(argv: list[str]) -> None:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.exit("usage: python -m coursekit.slots -- COMMAND [ARGS...]")
    only = os.environ.pop("COURSEKIT_SLOT", None)  # the prewarm step picks its directory
    taken = acquire(only=int(only) if only else None)
    if taken:
        slot, fd = taken
        os.set_inheritable(fd, True)  # the lock lives as long as the exec'd process
        os.environ["EVCXR_TMPDIR"] = str(slot)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
