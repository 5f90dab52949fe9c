"""Compile every framework once in each warm build directory (coursekit.setup.slots), so that a
learner's first cell in a framework notebook only compiles the cell itself.

Each (directory, framework) pair is stamped when done; the stamp names the pins, evcxr and
rustc, so a change of any of them warms again. Run by `coursekit setup`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time

from tqdm import tqdm

from .. import pins
from ..kernel.session import KernelSession
from . import slots
from .install import SetupError, evcxr_config_dir, torch_lib_dir

STAMP = slots.STAMP
CELL_TIMEOUT_S = 3600


PRELUDE_STAMP = "coursekit-prelude.txt"  # the prelude_key its kernels last built the prelude for
PRELUDE = pins.PACKAGE / "kernel" / "prelude"


def _prelude_files() -> list:
    return [p for p in sorted(PRELUDE.rglob("*")) if p.is_file() and "target" not in p.parts]


def _sources() -> list[str]:
    """The course's evcxr configuration, the pool's cargo configuration and the prelude crate."""
    config = evcxr_config_dir(prelude=True)
    sources = [(config / "init.evcxr").read_text(), (config / "prelude.rs").read_text()]
    sources.append(slots.cargo_config(slots.pool_dir()))
    return sources + [p.read_text() for p in _prelude_files()]


def _key(spec: list) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def warm_key(framework: str) -> str:
    """Names everything a warm build depends on: pins, evcxr, rustc, the course's evcxr
    configuration and the prelude crate."""
    libtorch = str(torch_lib_dir()) if framework == "tch" else ""  # torch-sys links against it
    return _key(
        [pins.frameworks()[framework], pins.evcxr_version(), pins.rustc_banner(), _sources(), libtorch]
    )


def prelude_key() -> str:
    """Names what decides whether a kernel rebuilds the prelude crate in a warm directory:
    evcxr, rustc, the configuration, and the prelude's files, their paths and times (cargo
    rebuilds a path dependency whose sources are newer than its build, as after a fresh clone)."""
    files = [(str(p), p.stat().st_mtime_ns) for p in _prelude_files()]
    return _key([pins.evcxr_version(), pins.rustc_banner(), _sources(), files])


def prelude_built(slot: int | str) -> bool:
    """This directory's prelude build is today's: a kernel started there compiles no prelude."""
    with contextlib.suppress(OSError):
        return (slots.pool_dir() / f"slot-{slot}" / PRELUDE_STAMP).read_text() == prelude_key()
    return False


def mark_prelude_built(slot: int | str) -> None:
    (slots.pool_dir() / f"slot-{slot}" / PRELUDE_STAMP).write_text(prelude_key())


def _stamps(slot: int) -> dict:
    try:
        return json.loads((slots.pool_dir() / f"slot-{slot}" / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def is_warm(slot: int, framework: str) -> bool:
    return _stamps(slot).get(framework) == warm_key(framework)


def current(slot_dir) -> bool:
    """Every framework compiled in this build directory matches today's pins and rustc."""
    try:
        stamps = json.loads((slot_dir / STAMP).read_text())
    except (OSError, ValueError):
        return True  # nothing compiled by the prewarm: nothing stale
    frameworks = pins.frameworks()
    return all(fw in frameworks and key == warm_key(fw) for fw, key in stamps.items())


def _mark_warm(slot: int, framework: str) -> None:
    stamps = _stamps(slot)
    stamps[framework] = warm_key(framework)
    (slots.pool_dir() / f"slot-{slot}" / STAMP).write_text(json.dumps(stamps, indent=1))


def run_cells(cells: list[str], slot: int | str | None = None, timeout: float = CELL_TIMEOUT_S) -> list[str]:
    """Run cells in the course kernel (its evcxr in warm directory `slot`); return each cell's
    stdout. Raises SetupError on the first error."""
    env = {"COURSEKIT_SLOT": str(slot)} if slot is not None else {}
    with KernelSession("rust-pytorch", env=env, startup_timeout=120) as kernel:
        results = []
        for code in cells:
            ran = kernel.run(code, timeout=timeout)
            if not ran.ok:
                raise SetupError(f"this cell failed in evcxr: {code!r}: {ran.error}")
            results.append(ran.stream("stdout"))
        return results


def warm(slot: int, framework: str) -> float:
    """Compile and run one framework's smoke cell in one directory; return the seconds taken."""
    started = time.monotonic()
    fw = pins.frameworks()[framework]
    run_cells(["\n".join(pins.dep_lines(framework)), fw["smoke"]], slot=slot)
    _mark_warm(slot, framework)
    return time.monotonic() - started


def prewarm_all() -> None:
    todo = [(s, fw) for s in range(slots.POOL_SIZE) for fw in pins.frameworks() if not is_warm(s, fw)]
    if not todo:
        print("[coursekit setup] frameworks already compiled (warm)", flush=True)
        return
    print(
        f"[coursekit setup] compiling the frameworks: {len(todo)} steps; the first run takes many minutes",
        flush=True,
    )
    with tqdm(todo, unit="step", dynamic_ncols=True) as bar:
        for slot, framework in bar:
            if is_warm(slot, framework):  # copied with a warm directory (slots.seed)
                continue
            if slots.busy(slot):  # a running kernel (JupyterLab, tests) holds it: do not wait
                bar.write(
                    f"  warm directory {slot} is in use by a kernel: skipped ({framework} warms on first use)"
                )
                continue
            bar.set_description(f"{framework} (warm directory {slot})")
            seconds = warm(slot, framework)
            bar.write(f"  {framework} in warm directory {slot}: {seconds:.0f} s")
