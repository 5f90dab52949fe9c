"""Warm build directories for evcxr kernels.

evcxr builds each session's code in a fresh temporary directory, so every new kernel
re-runs the build scripts of its crates (for tch: a C++ compile) and relinks everything. A
kernel started through `python -m coursekit.setup.slots -- evcxr_jupyter ...` instead takes the
first free directory of a pool (EVCXR_TMPDIR), locked for as long as that evcxr process
lives. The setup's prewarm step builds every framework in the first directory and copies it
to the other POOL_SIZE - 1; a kernel that finds them all busy takes one of OVERFLOW more (a
copy of a warm one on first use, warm afterwards), and when those are busy too, evcxr's own
temporary directory (removed when evcxr exits). `coursekit clean` prunes what is not needed.

A copy is warm where it lands: cargo's fingerprints name paths relative to the target
directory, and it rewrites the build scripts' recorded output paths to the new place. Copying
a 1-2 GB directory takes seconds; rebuilding it from evcxr's dependency cache took minutes
(build scripts, proc macros and linking are not cached).

The pool's cargo configuration compiles the frameworks, which do the numerical work, at
opt-level 2; the course kernel's evcxr configuration (`:opt 0`, setup/install.py) compiles
each cell's own crate without optimisation: Burn's and DFDX's generic code is instantiated
in the cell's crate, and optimising it made a small Burn cell take 5.0 s instead of 2.2 s
(bench/results.md has the current figures), and at opt-level 1 course/04_training/03_burn.ipynb's
cells compiled 4-5 times slower (2026-12-04: a typical cell 4-6 s became 18-30 s). A
notebook whose cells run heavy generic code says `:opt 1` in its first cell: one forward
pass of Burn's ResNet-18 took 28 s in a cell at opt-level 0 and 1.8 s at 1 (2026-12-06).
What is measured is compiled at opt-level 2 (content/measure.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

POOL_SIZE = int(os.environ.get("COURSEKIT_SLOTS", "2"))
OVERFLOW = 4
STAMP = "coursekit-warm.json"  # what the prewarm step compiled here (setup/prewarm.py)
CARGO_CONFIG = """\
# Written by coursekit (slots.py): dependencies run fast (cells: evcxr's `:opt`).
[profile.dev.package."*"]
opt-level = 2
"""


def cache_dir() -> Path:
    """The kit's own cache (~/.cache/coursekit)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "coursekit"


def pool_dir() -> Path:
    if os.environ.get("COURSEKIT_POOL"):  # set inside a grading sandbox
        return Path(os.environ["COURSEKIT_POOL"])
    return cache_dir() / "evcxr-slots"


def cargo_config(pool: Path) -> str:
    """The pool's cargo configuration: CARGO_CONFIG, then the patch table of the stand-ins
    set-up wrote into the pool (setup/stand_ins.py)."""
    from .stand_ins import patch_section

    return CARGO_CONFIG + patch_section(pool / ".cargo")


def ensure_pool(pool: Path | None = None) -> Path:
    pool = pool or pool_dir()
    config, text = pool / ".cargo" / "config.toml", cargo_config(pool)
    if not (config.is_file() and config.read_text() == text):
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(text)
    return pool


def lock_file(path: Path, wait: bool, shared: bool = False) -> int | None:
    """An fd holding an exclusive (or shared) lock on `path` (created if missing), released
    when the fd is closed or the process ends; None when another process holds it and `wait`
    is False."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _lock(slot: Path, wait: bool) -> int | None:
    slot.mkdir(exist_ok=True)
    return lock_file(slot / ".lock", wait)


def busy(name: int | str) -> bool:
    """A kernel holds this build directory now."""
    fd = _lock(ensure_pool() / f"slot-{name}", wait=False)
    if fd is not None:
        os.close(fd)
    return fd is None


def acquire(pool: Path | None = None, only: str | None = None) -> tuple[Path, int] | None:
    """Lock the first free slot (or wait for the slot named `only`): its directory and the
    locked fd; None when every slot is busy."""
    pool = ensure_pool(pool)
    for n in range(POOL_SIZE + OVERFLOW) if only is None else [only]:
        fd = _lock(pool / f"slot-{n}", wait=only is not None)
        if fd is not None:
            return pool / f"slot-{n}", fd
    return None


def left_behind(path: Path) -> bool:
    """What a copy of a build directory leaves out: its lock, and a past session's cell
    libraries (evcxr renames new ones onto them)."""
    return path.name == ".lock" or path.name.startswith("libcode_")


def seed(slot: Path) -> Path | None:
    """Fill a new build directory with a copy of the warm one with the most frameworks (a
    free one first: a busy one is copied fingerprints first, so that what a kernel compiles
    meanwhile is seen as stale, never as fresh); the copy of the directory's stamp comes last.
    Returns the directory copied, or None (not new, nothing warm, too little disk, or a copy
    that failed: it is removed, and evcxr builds there from the start)."""
    if (slot / "target").exists():
        return None
    warm = []
    for d in slot.parent.glob("slot-*"):
        with contextlib.suppress(OSError, ValueError):
            if d != slot and (d / "target").is_dir():
                warm.append((len(json.loads((d / STAMP).read_text())), d))
    ranked = [d for _, d in sorted(warm, key=lambda w: -w[0])]
    if not ranked:
        return None
    src, fd = ranked[0], None
    for d in ranked:
        if (fd := _lock(d, wait=False)) is not None:
            src = d
            break
    try:
        return src if _copy(src, slot) else None
    except OSError as exc:  # a full disk, a file the copy cannot read
        shutil.rmtree(slot / "target", ignore_errors=True)
        (slot / STAMP).unlink(missing_ok=True)
        print(f"[coursekit] {slot.name}: no copy of {src.name} ({exc}); evcxr builds it", file=sys.stderr)
        return None
    finally:
        if fd is not None:
            os.close(fd)


def _copy(src: Path, slot: Path) -> bool:
    """Copy build directory `src` into `slot` (False: too little disk). A busy one changes
    under the copy: what cargo removes meanwhile is left out."""
    files, links, total = [], [], 0
    for dirpath, dirs, names in os.walk(src):  # os.walk skips a directory that vanishes
        for name in dirs + names:
            path = Path(dirpath, name)
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                links.append(path)
            elif stat.S_ISREG(st.st_mode) and not left_behind(path) and name != STAMP:
                files.append(path)
                total += st.st_size
    if shutil.disk_usage(slot.parent).free < 2 * total:
        return False
    files.sort(key=lambda p: ".fingerprint" not in p.parts)
    for path in files:
        dst = slot / path.relative_to(src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            shutil.copy2(path, dst)
    for link in links:
        dst = slot / link.relative_to(src)
        with contextlib.suppress(FileNotFoundError):
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.symlink_to(os.readlink(link))
    with contextlib.suppress(FileNotFoundError):
        shutil.copy2(src / STAMP, slot / STAMP)
    return True


ENTRY_BYTES = 4096  # what size() counts at least for a file, directory or link: its inode


def size(path: Path) -> int:
    """Bytes on disk under `path` (the grader's disk limit): each file once, however many
    hard links it has (a hard link inside a job would otherwise hide or double its size),
    and each entry, directories and empty files too, as at least ENTRY_BYTES (millions of
    empty entries would fill the disk's inodes at no cost)."""
    seen, total = set(), 0
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += max(st.st_blocks * 512, ENTRY_BYTES)
    return total


def prune(everything: bool = False, warm=lambda slot: True) -> list[tuple[Path, int]]:
    """Remove the build directories no kernel uses that are not needed: overflow ones, and
    warm ones whose compiled frameworks are stale (`warm(slot)` false); with `everything`,
    all of them. Returns what was removed and its size."""
    removed = []
    pool = pool_dir()
    for slot in sorted(pool.glob("slot-*")):
        name = slot.name.removeprefix("slot-")
        keep = name.isdigit() and int(name) < POOL_SIZE or not name.isdigit()
        if keep and warm(slot) and not everything:
            continue
        fd = _lock(slot, wait=False)
        if fd is None:  # a kernel is using it
            continue
        try:
            removed.append((slot, size(slot)))
            shutil.rmtree(slot, ignore_errors=True)
        finally:
            os.close(fd)
    return removed


def main(argv: list[str]) -> None:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.exit("usage: python -m coursekit.setup.slots -- COMMAND [ARGS...]")
    only = os.environ.pop("COURSEKIT_SLOT", None)  # the prewarm step picks its directory
    got = acquire(only=only)
    if got is not None:  # else evcxr's own temporary directory
        slot, fd = got
        os.set_inheritable(fd, True)  # the lock lives as long as the exec'd process
        os.environ["EVCXR_TMPDIR"] = str(slot)
        started = time.monotonic()
        if (src := seed(slot)) is not None:
            print(
                f"[coursekit] {slot.name}: a copy of {src.name} ({time.monotonic() - started:.0f} s)",
                file=sys.stderr,
            )
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
