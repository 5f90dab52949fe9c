"""Warm build directories for evcxr kernels.

evcxr builds each session's code in a fresh temporary directory, so every new kernel
re-runs the build scripts of its crates (for tch: a C++ compile) and relinks everything. A
kernel started through `python -m coursekit.setup.slots -- evcxr_jupyter ...` instead takes the
first free directory of a pool (EVCXR_TMPDIR), locked for as long as that evcxr process
lives. The setup's prewarm step builds every framework in the first POOL_SIZE directories;
a kernel that finds them all busy takes the next one (built from evcxr's dependency cache
on first use, warm afterwards).

The pool's cargo configuration compiles each cell's own crate without optimisation (the
frameworks, which do the numerical work, stay at opt-level 2): Burn's and DFDX's generic
code is instantiated in the cell's crate, and optimising it made a small Burn cell take
5.0 s instead of 2.2 s (bench/results.md has the current figures).
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

POOL_SIZE = int(os.environ.get("COURSEKIT_SLOTS", "2"))
MAX_SLOTS = 64
CARGO_CONFIG = """\
# Written by coursekit (slots.py): cells compile fast, dependencies run fast.
[profile.dev]
opt-level = 0
[profile.dev.package."*"]
opt-level = 2
"""


def pool_dir() -> Path:
    if os.environ.get("COURSEKIT_POOL"):  # set inside a grading sandbox
        return Path(os.environ["COURSEKIT_POOL"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "coursekit" / "evcxr-slots"


def ensure_pool(pool: Path | None = None) -> Path:
    pool = pool or pool_dir()
    config = pool / ".cargo" / "config.toml"
    if not (config.is_file() and config.read_text() == CARGO_CONFIG):
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(CARGO_CONFIG)
    return pool


def acquire(pool: Path | None = None, only: str | None = None) -> tuple[Path, int]:
    """Lock the first free slot (or wait for the slot named `only`): its directory and the
    locked fd."""
    pool = ensure_pool(pool)
    for n in range(MAX_SLOTS) if only is None else [only]:
        slot = pool / f"slot-{n}"
        slot.mkdir(exist_ok=True)
        fd = os.open(slot / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if only is not None else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            continue
        return slot, fd
    raise RuntimeError(f"all {MAX_SLOTS} evcxr build directories in {pool} are busy")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.exit("usage: python -m coursekit.setup.slots -- COMMAND [ARGS...]")
    only = os.environ.pop("COURSEKIT_SLOT", None)  # the prewarm step picks its directory
    slot, fd = acquire(only=only)
    os.set_inheritable(fd, True)  # the lock lives as long as the exec'd process
    os.environ["EVCXR_TMPDIR"] = str(slot)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
