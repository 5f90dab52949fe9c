"""Memory as a check sees it: what it may still take, and whether the system ran out.

On Binder a pod's cgroup limits memory (2 GB), not the machine: each figure comes from the
nearest cgroup above this process that has a memory controller, v2 or v1. Where there is no
/proc (macOS), only the machine's figures count and running out is not detected.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import psutil

CGROUP_ROOT, PROC = Path("/sys/fs/cgroup"), Path("/proc/self")


def _groups(cgroup_root: Path, proc: Path) -> Iterator[tuple[Path, int]]:
    """This process's memory cgroups, nearest first, with their cgroup version."""
    with contextlib.suppress(OSError):
        for line in (proc / "cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                top, version = cgroup_root, 2
            elif "memory" in controllers.split(","):
                top, version = cgroup_root / "memory", 1
            else:
                continue
            group = top / path.strip().lstrip("/")
            while group.is_relative_to(top):
                yield group, version
                group = group.parent


def free(cgroup_root: Path = CGROUP_ROOT, proc: Path = PROC) -> int:
    """Bytes of memory this process may still take: what the machine has available, less
    where a cgroup above it, such as a Binder pod's, is nearer its limit."""
    left = psutil.virtual_memory().available
    for group, version in _groups(cgroup_root, proc):
        limit, used = (
            ("memory.max", "memory.current")
            if version == 2
            else ("memory.limit_in_bytes", "memory.usage_in_bytes")
        )
        with contextlib.suppress(OSError, ValueError):  # "max", or no such file: no limit here
            left = min(left, int((group / limit).read_text()) - int((group / used).read_text()))
    return left


def oom_kills(cgroup_root: Path = CGROUP_ROOT, proc: Path = PROC) -> int:
    """How many processes of this process's nearest memory cgroup (its subtree included) the
    system has killed for lack of memory so far; 0 where no cgroup counts them."""
    for group, _ in _groups(cgroup_root, proc):
        if (kills := oom_kill_count(group)) is not None:
            return kills
    return 0


def oom_kill_count(group: Path) -> int | None:
    """A memory cgroup's count of OOM kills (v2's memory.events, v1's memory.oom_control)."""
    for name in ("memory.events", "memory.oom_control"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            counters = dict(line.split() for line in (group / name).read_text().splitlines())
            return int(counters["oom_kill"])
    return None


def volunteer(score: int = 1000) -> None:
    """Where memory runs out, the system stops this process, and every process it starts
    later, before the others, the highest `score` first (Linux's oom_score_adj, up to 1000;
    nothing elsewhere). A check is cheap to run again, the learner's open kernels are not:
    `check` takes 500, its kernel 1000, so the kernel goes first and the check says why."""
    with contextlib.suppress(OSError), open(PROC / "oom_score_adj", "w") as adj:
        adj.write(str(score))
