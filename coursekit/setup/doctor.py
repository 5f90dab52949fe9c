"""`coursekit doctor`: check every piece the course needs; print each problem with its fix."""

from __future__ import annotations

import json
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

from .. import pins
from ..kernel.evcxr_child import kernels_dir
from . import slots

FIX_SETUP = "run `make setup` (or `python -m coursekit setup`)"
KERNELS = ("rust", "rust-pytorch")


class Report:
    def __init__(self):
        self.problems = 0

    def ok(self, what: str) -> None:
        print(f"  ok    {what}")

    def bad(self, what: str, fix: str) -> None:
        self.problems += 1
        print(f"  FAIL  {what}\n        fix: {fix}")

    def note(self, what: str) -> None:
        print(f"  note  {what}")

    def check(self, good: bool, what: str, fix: str) -> bool:
        (self.ok(what) if good else self.bad(what, fix))
        return good


def _python_packages(r: Report) -> None:
    wrong = []
    for name, version in pins.python_requirements().items():
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        if have != version:
            wrong.append(f"{name} {have or 'missing'} (want {version})")
    r.check(
        not wrong,
        f"Python packages pinned in requirements.txt ({len(pins.python_requirements())})"
        + (": " + ", ".join(wrong) if wrong else ""),
        "run `make setup`; it reinstalls from requirements.txt and constraints.txt",
    )


def _rust(r: Report) -> None:
    from .evcxr_build import binary, installed_version, wanted_version

    rustc = shutil.which("rustc")
    if r.check(bool(rustc), f"rustc on PATH ({rustc})", "install Rust with rustup (https://rustup.rs)"):
        version = pins.rustc_version()
        r.check(
            version != "" and int(version.split(".")[1]) >= 95,
            f"rustc {version or '?'} >= 1.95 (evcxr's MSRV)",
            "rustup update stable",
        )
    have = installed_version()
    r.check(
        have == wanted_version(),
        f"evcxr_jupyter {have or 'missing'} at {binary()} (pinned, patched: {wanted_version()})",
        "run `make setup`; it builds the pinned evcxr_jupyter with the course's patch",
    )


def _kernelspecs(r: Report) -> dict | None:
    from jupyter_client.kernelspec import KernelSpecManager

    found = KernelSpecManager().find_kernel_specs()
    env = None
    for name in KERNELS:
        ours = Path(kernels_dir()) / name
        path = found.get(name)
        if not r.check(
            path is not None and Path(path) == ours,
            f"kernelspec {name} at {path}",
            f"{FIX_SETUP}; if another `{name}` kernel shadows it, remove that one "
            f"(`jupyter kernelspec remove {name}` outside this environment)"
            if path
            else FIX_SETUP,
        ):
            continue
        spec = json.loads((ours / "kernel.json").read_text())
        env = spec.get("env", {})
        missing = [
            k
            for k in (
                "RUST_SRC_PATH",
                "LD_LIBRARY_PATH",
                "LIBTORCH_USE_PYTORCH",
                "EVCXR_CONFIG_DIR",
                "COURSEKIT_EVCXR",
            )
            if k not in env
        ]
        r.check(not missing, f"kernelspec {name} env" + (f" lacks {missing}" if missing else ""), FIX_SETUP)
    return env


PROBE = ("let coursekit_probe = vec![1.5f32, 2.5];", 'println!("{}", coursekit_probe.len());')


def probe_kernel() -> str | None:
    """Run what the lessons do every few cells through the course kernel: a variable made
    with `vec![...]` in one cell, used in the next (evcxr's analyzer must infer its type from
    the std sources). None if it works, else what went wrong."""
    from ..kernel.session import KernelSession

    try:
        with KernelSession("rust-pytorch", startup_timeout=120) as kernel:
            first = kernel.run(PROBE[0], timeout=300)
            second = kernel.run(PROBE[1], timeout=300) if first.ok else first
    except (RuntimeError, TimeoutError, OSError) as exc:
        return f"the kernel did not run the probe: {exc}"
    if not first.ok or not second.ok or second.stream().strip() != "2":
        return f"a variable kept between two cells failed: {second.error or second.stream()!r}"
    return None


def _environment(r: Report, env: dict | None) -> None:
    from . import rust_src

    env = env or {}
    src = Path(env.get("RUST_SRC_PATH", "/nonexistent"))
    if r.check(rust_src.is_library(src), f"Rust std sources at {src}", FIX_SETUP):
        have, rustc = rust_src.version_of(src), rust_src.rustc_version()
        r.check(
            have is not None and rust_src.fits(have, rustc),
            f"Rust std sources {have or '(version unknown)'} fit rustc {rustc}",
            "unset RUST_SRC_PATH if it is set, then " + FIX_SETUP + " (it fetches fitting sources)",
        )
    if os.environ.get("RUST_SRC_PATH"):  # set-up would take these
        try:
            rust_src.find()
            r.ok(f"RUST_SRC_PATH={os.environ['RUST_SRC_PATH']} fits rustc")
        except rust_src.SourcesError as exc:
            r.bad(
                str(exc),
                "unset RUST_SRC_PATH (set-up then finds or fetches fitting sources), then " + FIX_SETUP,
            )
    try:
        import torch

        want = pins.frameworks()["tch"]["torch"]
        have = torch.__version__.split("+")[0]
        r.check(
            have == want,
            f"torch {torch.__version__} matches tch's libtorch {want}",
            f"pip install torch=={want} (tch {pins.frameworks()['tch']['deps'][0]} binds it)",
        )
        torch_lib = Path(torch.__file__).parent / "lib"
        libpath = env.get("LD_LIBRARY_PATH", "").split(os.pathsep)
        r.check(
            str(torch_lib) in libpath and (torch_lib / "libtorch_cpu.so").is_file(),
            f"library path of the kernels includes {torch_lib}",
            FIX_SETUP,
        )
    except ImportError:
        r.bad("torch importable", "run `make setup`")


def evcxr_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evcxr"


def _cache(r: Report) -> None:
    from . import rust_src
    from .prewarm import current, is_warm

    cache = evcxr_cache()
    r.check(
        cache.is_dir() and any(cache.iterdir()),
        f"evcxr dependency cache at {cache}",
        "it fills on first use; " + FIX_SETUP + " fills it at once",
    )
    cold = [
        f"{fw} in directory {s}"
        for s in range(slots.POOL_SIZE)
        for fw in pins.frameworks()
        if not is_warm(s, fw)
    ]
    r.check(
        not cold,
        "frameworks prewarmed"
        + (f" (cold: {', '.join(cold)})" if cold else f" in every warm directory ({slots.POOL_SIZE})"),
        FIX_SETUP + " (takes minutes the first time)",
    )
    pool = slots.pool_dir()
    dirs = sorted(pool.glob("slot-*"))
    prunable = [
        d for d in dirs if not current(d) or (d.name[5:].isdigit() and int(d.name[5:]) >= slots.POOL_SIZE)
    ]
    sizes = {
        "build directories": sum(slots.size(d) for d in dirs),
        "evcxr's dependency cache": slots.size(cache),
        "Rust std sources": slots.size(rust_src.cache_dir()),
    }
    r.note("disk: " + ", ".join(f"{what} {size / 2**30:.1f} GiB" for what, size in sizes.items()))
    if prunable:
        names = ", ".join(d.name for d in prunable)
        r.note(f"build directories that `coursekit clean` would remove when no kernel uses them: {names}")


def doctor() -> int:
    r = Report()
    print(f"coursekit doctor (Python {sys.version.split()[0]} at {sys.prefix})")
    _python_packages(r)
    _rust(r)
    env = _kernelspecs(r)
    _environment(r, env)
    try:
        _cache(r)
    except OSError as exc:  # init.evcxr missing: set-up never ran
        r.bad(f"evcxr configuration ({exc})", FIX_SETUP)
    if not r.problems:  # the real thing, once every piece is in place
        problem = probe_kernel()
        r.check(
            problem is None,
            "the course kernel keeps a `vec![...]` variable from one cell to the next"
            + (f": {problem}" if problem else ""),
            "the std sources probably do not fit rustc: unset RUST_SRC_PATH, then " + FIX_SETUP,
        )
    print(f"{r.problems} problem(s)" if r.problems else "all good")
    return 1 if r.problems else 0
