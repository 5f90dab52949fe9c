"""`coursekit bench`: measure compile times and cell latencies; write bench/results.md.

Measured, per framework: the cold compile (evcxr's defaults: no dependency cache, a fresh
build directory, its default linker), the compile with the dependency cache but a fresh
build directory, and — with the course's settings (warm build directory) — the first cells
after opening a notebook and the median latency of small cells. Then the overhead of the
rust-pytorch kernel over the bare evcxr kernel on the same Rust cells, and the course's
settings against evcxr's defaults. `--setup` also times the whole set-up on a fresh HOME;
`--only PART` measures one part again and keeps the other figures of the results file.
The time per test module of the last whole `make test` (conftest.py) is copied in.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from . import pins
from .kernel.evcxr_child import evcxr_spec, kernels_dir
from .learner.memory import oom_kill_count
from .pins import ROOT
from .setup import evcxr_build, slots

SMALL_CELLS = {  # build a 2x2 tensor, matmul, sum: a typical small cell once a framework is loaded
    "tch": (
        "let t = tch::Tensor::from_slice(&[1f32, 2., 3., 4.]).view([2, 2]);\n"
        "f64::try_from(t.matmul(&t).sum(tch::Kind::Float)).unwrap()"
    ),
    "candle": (
        "let t = candle_core::Tensor::new(&[[1f32, 2.], [3., 4.]], &candle_core::Device::Cpu).unwrap();\n"
        "t.matmul(&t).unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap()"
    ),
    "burn": (
        "let t = burn::tensor::Tensor::<burn::backend::NdArray, 2>::from_floats(\n"
        "    [[1.0, 2.0], [3.0, 4.0]], &Default::default());\n"
        "t.clone().matmul(t).sum().into_scalar()"
    ),
    "dfdx": (
        "use dfdx::prelude::*;\nlet dev: Cpu = Default::default();\n"
        "let t = dev.tensor([[1f32, 2.], [3., 4.]]);\nt.clone().matmul(t).sum::<Rank0, _>().array()"
    ),
    "plain": "let v: Vec<f32> = (0..100).map(|i| i as f32).collect();\nv.iter().sum::<f32>()",
}
REPEATS = 7


class _DefaultsSpec(KernelSpecManager):
    """Bare evcxr_jupyter: its own fresh temporary build directory, no course settings."""

    def get_kernel_spec(self, kernel_name, **kwargs):
        return evcxr_spec(_spec_env("rust")["COURSEKIT_EVCXR"], "evcxr defaults", in_slot=False)


class Kernel:
    def __init__(self, name: str, env: dict | None = None):
        ksm = _DefaultsSpec() if name == "defaults" else KernelSpecManager()
        self.km = KernelManager(kernel_name=name, kernel_spec_manager=ksm)
        self.km.start_kernel(env=env or dict(os.environ))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=300)

    def run(self, code: str) -> float:
        started = time.monotonic()
        reply = self.kc.execute_interactive(code, timeout=3600, output_hook=lambda msg: None)
        seconds = time.monotonic() - started
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"benchmark cell failed: {code[:60]!r}: {reply['content'].get('evalue')}")
        return seconds

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def _median_cell(kernel: Kernel, code: str) -> float:
    kernel.run(code)  # the first run may rebuild after a :dep change
    return statistics.median(kernel.run(code) for _ in range(REPEATS))


def defaults_env(home: Path) -> dict:
    """evcxr as it comes: no init.evcxr (no dependency cache), no prelude, no ccache, empty
    caches; what tch and evcxr need to run at all (PATH, libraries, std sources) stays."""
    env = dict(os.environ)
    env.update(_spec_env("rust"))
    for key in ("EVCXR_CONFIG_DIR", "CC", "CXX", "EVCXR_TMPDIR"):
        env.pop(key, None)
    env["XDG_CONFIG_HOME"] = str(home / "config")  # evcxr finds no config there
    env["XDG_CACHE_HOME"] = str(home / "cache")
    return env


def _spec_env(name: str) -> dict:
    return json.loads((Path(kernels_dir()) / name / "kernel.json").read_text())["env"]


def bench_framework(fw: str, scratch: Path) -> dict:
    deps = "\n".join(pins.dep_lines(fw))
    smoke = pins.frameworks()[fw]["smoke"]
    row: dict = {}
    # Cold: evcxr defaults (linker forced to evcxr's built-in default, `system`).
    k = Kernel("defaults", env=defaults_env(scratch / f"defaults-{fw}"))
    try:
        k.run(":linker system")
        row["cold_compile_s"] = k.run(deps) + k.run(smoke)
        row["defaults_cell_s"] = _median_cell(k, SMALL_CELLS[fw])
    finally:
        k.close()
    # The course's dependency cache, but a fresh build directory (a new slot, removed after).
    fresh = "bench-fresh"
    k = Kernel("rust-pytorch", env=dict(os.environ, COURSEKIT_SLOT=str(fresh)))
    try:
        row["cached_compile_s"] = k.run(deps) + k.run(smoke)
    finally:
        k.close()
        shutil.rmtree(slots.pool_dir() / f"slot-{fresh}", ignore_errors=True)
    # The course's settings, run as nbclient does: the first cells right after start.
    started = time.monotonic()
    k = Kernel("rust-pytorch")
    try:
        ready = time.monotonic() - started
        row["warm_dep_cell_s"] = k.run(deps)
        row["warm_first_cell_s"] = k.run(smoke)
        row["warm_open_to_first_result_s"] = ready + row["warm_dep_cell_s"] + row["warm_first_cell_s"]
        row["course_cell_s"] = _median_cell(k, SMALL_CELLS[fw])
    finally:
        k.close()
    # In JupyterLab: the kernel knows its notebook and loads the first cell's crates in the
    # background; the learner runs the cells once that is done.
    notebook = scratch / f"{fw}.ipynb"
    notebook.write_text(json.dumps({"cells": [{"cell_type": "code", "source": deps}]}))
    started = time.monotonic()
    k = Kernel("rust-pytorch", env=dict(os.environ, JPY_SESSION_NAME=str(notebook)))
    try:
        k.run("%%python\nget_ipython().kernel.warmed.result()")
        row["lab_warm_up_s"] = time.monotonic() - started
        row["lab_dep_cell_s"] = k.run(deps)
        row["lab_first_cell_s"] = k.run(smoke)
    finally:
        k.close()
    return row


LINKERS = {"cc", "c++", "ld", "mold", "ld.mold", "collect2", "as", "cc1", "cc1plus", "ccache"}


class _Sampler:
    """Samples a kernel's process tree and says, for each moment, what it was busy with, the
    first of: rustc compiling; a linker or C compiler; a build script; cargo on its own
    (`cargo metadata`, checking what is fresh); the runner executing the cell's code; evcxr
    on its own (its embedded rust-analyzer, loading the compiled cell); or none of them."""

    def __init__(self, pid: int):
        import psutil

        self.root = psutil.Process(pid)
        self.seconds: dict[str, float] = {}
        self.last: dict[int, float] = {}

    def _kind(self, p, pids) -> str:
        name = p.name()
        if name.startswith("evcxr"):  # evcxr's runner is evcxr_jupyter run by evcxr
            parent = pids.get(p.ppid())
            return "runner" if parent is not None and parent.name().startswith("evcxr") else "evcxr"
        if name.startswith("build_script") or name.startswith("build-script"):
            return "build script"
        if name in LINKERS:
            return "linker"
        return name if name in ("rustc", "cargo") else "other"

    def sample(self, dt: float) -> None:
        import psutil

        try:
            tree = self.root.children(recursive=True)
        except psutil.Error:
            return
        busy: dict[str, float] = {}
        pids = {p.pid: p for p in tree}
        for p in tree:
            with contextlib.suppress(psutil.Error):
                cpu = sum(p.cpu_times()[:2])
                used = cpu - self.last.get(p.pid, cpu)
                self.last[p.pid] = cpu
                kind = self._kind(p, pids)
                busy[kind] = busy.get(kind, 0.0) + used
        order = [
            ("rustc", "rustc compiling"),
            ("linker", "linking (or a C compiler)"),
            ("build script", "a build script"),
            ("cargo", "cargo on its own (metadata, freshness)"),
            ("runner", "the cell's code"),
            ("evcxr", "evcxr on its own (rust-analyzer, loading the cell)"),
        ]
        what = next(
            (label for kind, label in order if busy.get(kind, 0.0) > 0.2 * dt),
            "none busy (starting processes, messages)",
        )
        self.seconds[what] = self.seconds.get(what, 0.0) + dt


UNPRIMED = "kernel start to first result, without the course's evcxr patch"
# each change of evcxr.patch switched off: evcxr as released, but for the lean standard library
RELEASED = {
    "EVCXR_PRIME_THREADS": "0",
    "EVCXR_LAZY_ANALYSIS": "0",
    "EVCXR_RUSTC_REPLAY": "0",
    "EVCXR_VALID_DEPS": "",
}


CHECKS = "kernel start to first result, in a check's kernel (the cell in a block, as a test runs)"


def bench_startup(fw: str) -> dict:
    """Kernel start to the first framework cell's result in a lesson's kernel without its
    background warm-up (as the lessons' tests pay it), split by what the kernel's processes
    were doing; the same with evcxr's analyzer indexing as released (coursekit/setup/evcxr.patch
    switched off); and in a check's kernel, whose analyzer indexes nothing for a test."""
    from .kernel.session import OOM_FIRST

    phases = _startup(fw)
    phases[UNPRIMED] = _startup(fw, RELEASED)["kernel start to first result"]
    phases[CHECKS] = _startup(fw, {OOM_FIRST: "1"}, block=True)["kernel start to first result"]
    return phases


def _startup(fw: str, env: dict | None = None, block: bool = False) -> dict:
    import threading

    from .kernel.session import KernelSession

    started = time.monotonic()
    session = KernelSession(env=env)
    phases = {"kernel start (Python side, to kernel_info)": time.monotonic() - started}
    sampler, stop = _Sampler(session.km.provisioner.pid), threading.Event()

    def run():
        last = time.monotonic()
        while not stop.wait(0.1):
            now = time.monotonic()
            sampler.sample(now - last)
            last = now

    watcher = threading.Thread(target=run, daemon=True)
    watcher.start()
    smoke = pins.frameworks()[fw]["smoke"]
    try:
        for label, code in (
            (":dep cell", "\n".join(pins.dep_lines(fw))),
            ("first cell", f"{{{smoke}}}" if block else smoke),
        ):
            sampler.seconds = {}
            t = time.monotonic()
            ran = session.run(code, timeout=1800)
            if not ran.ok:
                raise RuntimeError(f"{fw} {label} failed: {ran.error}")
            phases[f"{label}: whole"] = time.monotonic() - t
            phases.update({f"{label}: {what}": sec for what, sec in sampler.seconds.items()})
    finally:
        stop.set()
        watcher.join()
        session.close()
    phases["kernel start to first result"] = time.monotonic() - started
    return phases


LOOP_EXERCISES = {"tch": "01_tch", "candle": "02_candle", "burn": "03_burn", "dfdx": "04_dfdx"}
EDIT_S = 60  # a learner's edit between two saves, during which `watch` prepares the next check
CHECK_RUNS = 3  # one check's time varies by 2-3 s from run to run here: the loop reports medians
VERDICT = re.compile(r"\] \S+ (passed|failed)$")


def _timed_lines(cmd: list[str], until, timeout: float = 900) -> list[tuple[float, str]]:
    """Run `cmd` (Python's own modules), each line of its output with the seconds since the start;
    stop it once `until(lines)` holds."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, *cmd], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[tuple[float, str]] = []
    try:
        for line in proc.stdout:
            lines.append((time.monotonic() - started, line.rstrip()))
            if until(lines) or time.monotonic() - started > timeout:
                break
    finally:
        proc.terminate()  # `watch` stops as on Ctrl-C: it closes the kernel it started ahead
        rest, _ = proc.communicate(timeout=60)
    if proc.returncode not in (0, 1):  # `check` exits 1 when a task fails
        raise RuntimeError(f"{cmd} exited with {proc.returncode}: {rest[-2000:]}")
    return lines


def _verdict_times(lines: list[tuple[float, str]], since: float = 0.0) -> tuple[float, float, str]:
    """Seconds to the first test's verdict and to the score line after `since`; the score line."""
    after = [(t, line) for t, line in lines if t >= since]
    first = next(t for t, line in after if VERDICT.search(line))
    end, score = next((t, line) for t, line in after if "tasks pass" in line)
    return first - since, end - since, score


def bench_loop(fw: str, scratch: Path) -> dict:
    """The learner's loop on the framework's tensor exercise (warm caches): `coursekit check` of
    the unsolved notebook (the median of CHECK_RUNS), then `coursekit watch`, with the solved
    notebook saved over the unsolved one EDIT_S after the first verdicts."""
    name = LOOP_EXERCISES[fw] + ".ipynb"
    mine = scratch / "loop" / fw / "02_tensors" / name
    mine.parent.mkdir(parents=True)
    shutil.copy(ROOT / "exercises" / "02_tensors" / name, mine)
    row = {}
    checks = [
        _verdict_times(_timed_lines(["-m", "coursekit", "check", str(mine)], lambda lines: False))
        for _ in range(CHECK_RUNS)
    ]
    row["check_first_s"] = statistics.median(first for first, _, _ in checks)
    row["check_s"] = statistics.median(end for _, end, _ in checks)
    saved = []

    def save_once_checked(lines) -> bool:
        if not saved and "tasks pass" in lines[-1][1]:
            time.sleep(EDIT_S)
            saved.append(lines[-1][0] + EDIT_S)
            shutil.copy(ROOT / "solutions" / "02_tensors" / name, mine)
        return len([1 for _, line in lines if "tasks pass" in line]) == 2

    watch = _timed_lines(["-m", "coursekit", "watch", str(mine)], save_once_checked)
    row["watch_first_s"], row["watch_s"], score = _verdict_times(watch, since=saved[0])
    if not any("kernel ready" in line for t, line in watch if t >= saved[0]):
        raise RuntimeError(f"{fw}: watch's check after the save did not run in the kernel started ahead")
    row["watch_score"] = score.strip()
    return row


def bench_kernel_overhead(rounds: int = 15) -> dict:
    """The same dependency-free cells on both kernels, alternating so that drift in the
    machine's load hits both alike."""
    cells = [SMALL_CELLS["plain"], 'println!("{}", 6 * 7);', "let mut x = vec![1, 2]; x.push(3); x.len()"]
    kernels = {name: Kernel(name) for name in ("rust", "rust-pytorch")}
    times: dict[str, list[float]] = {name: [] for name in kernels}
    try:
        for k in kernels.values():
            k.run(cells[0])
        for _ in range(rounds):
            for code in cells:
                for name, k in kernels.items():
                    times[name].append(k.run(code))
    finally:
        for k in kernels.values():
            k.close()
    result = {name: statistics.median(t) for name, t in times.items()}
    result["overhead"] = result["rust-pytorch"] / result["rust"] - 1
    return result


GRADED = [("01_rust", "01_values_moves_clone.ipynb", 8), ("02_tensors", "02_candle.ipynb", 6)]


def bench_grading(scratch: Path, assignment: str, notebook: str, students: int) -> dict:
    """Grading throughput on one batch (half solved, half not): plain sequential `nbgrader
    autograde` (no sandbox) against `coursekit grade` (sandboxed, one job per core), and
    where a job's seconds go (the mean of the records' phases)."""
    import nbformat

    from .grading import grade

    scratch = scratch / assignment
    subs = scratch / "submissions"
    for i in range(students):
        src = ROOT / ("solutions" if i % 2 else "exercises") / assignment / notebook
        nb = nbformat.read(src, as_version=4)
        dest = subs / f"student{i}" / assignment / notebook
        dest.parent.mkdir(parents=True)
        nbformat.write(nb, dest)
    course = scratch / "nbgrader-course"
    (course / "solutions" / assignment).mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / assignment / notebook, course / "solutions" / assignment / notebook)
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(subs, course / "submitted")
    grade.run_nbgrader(course, ["generate_assignment", assignment, "--force"], {}, timeout=600)
    started = time.monotonic()
    result = grade.run_nbgrader(course, ["autograde", assignment, "--force"], {}, timeout=7200)
    sequential = time.monotonic() - started
    if result.returncode:
        raise RuntimeError(f"nbgrader autograde failed: {result.stdout[-1000:]}")
    grade.ensure_template_slot({assignment})  # a one-time compile, not part of any batch
    started = time.monotonic()
    records = grade.grade(subs, scratch / "graded", progress=False)
    parallel = time.monotonic() - started
    profile: dict[str, float] = {}
    for record in records:
        for phase, seconds in record.phases.items():
            profile[phase] = profile.get(phase, 0.0) + seconds / len(records)
    return {
        "notebook": f"{assignment}/{Path(notebook).stem}",
        "students": students,
        "jobs": os.cpu_count(),
        "nbgrader_s": sequential,
        "coursekit_s": parallel,
        "nbgrader_per_min": students / sequential * 60,
        "coursekit_per_min": students / parallel * 60,
        "job_s": sum(r.seconds for r in records) / len(records),
        "profile": profile,
    }


# Binder's limits (mybinder.org: about 2 GB of memory, 1 CPU), and what a learner runs there:
# the heaviest lessons and a check of the heaviest exercise, each alone, then lessons with a
# `coursekit check` of their solved exercise beside them. tests/test_binder.py runs those
# that fit (BINDER_TESTED): all but the Burn lesson with a check beside it.
BINDER_MEMORY = 2 << 30
BINDER_RUNS = {
    "the tch tensor lesson": ["course/02_tensors/01_tch.ipynb"],
    "the Burn tensor lesson": ["course/02_tensors/03_burn.ipynb"],
    "`coursekit check` of the solved Burn tensor exercise": ["solutions/02_tensors/03_burn.ipynb"],
    "a Part 1 lesson (Rust only), with `coursekit check` of its solved exercise beside it": [
        "course/01_rust_for_pytorch/03_errors.ipynb",
        "solutions/01_rust/03_errors.ipynb",
    ],
    "the tch tensor lesson, with `coursekit check` of its solved exercise beside it": [
        "course/02_tensors/01_tch.ipynb",
        "solutions/02_tensors/01_tch.ipynb",
    ],
    "the Burn tensor lesson, with `coursekit check` of its solved exercise beside it": [
        "course/02_tensors/03_burn.ipynb",
        "solutions/02_tensors/03_burn.ipynb",
    ],
}
BINDER_TESTED = {
    label: BINDER_RUNS[label]
    for label in (
        "the tch tensor lesson, with `coursekit check` of its solved exercise beside it",
        "the Burn tensor lesson",
        "`coursekit check` of the solved Burn tensor exercise",
    )
}


@contextlib.contextmanager
def limited_cgroups(name: str, limit: int = BINDER_MEMORY):
    """Cgroups (v1 or v2) holding Binder's CPU limit and a memory `limit` (Binder's), for
    `name`; on leaving, what is left in them is killed and they are removed."""
    from .grading.sandbox import CGROUP, _enable_v2_controllers, _v2

    if _v2():
        _enable_v2_controllers(CGROUP / "coursekit")
        groups = [CGROUP / "coursekit" / name]
    else:
        groups = [CGROUP / "memory" / "coursekit" / name, CGROUP / "cpu" / "coursekit" / name]
    try:
        for d in groups:
            d.mkdir(parents=True)
        set_memory_limit(groups, limit)
        if _v2():
            with contextlib.suppress(OSError):  # the cpu controller may not be delegated
                (groups[0] / "cpu.max").write_text("100000 100000")
        else:
            (groups[1] / "cpu.cfs_period_us").write_text("100000")
            (groups[1] / "cpu.cfs_quota_us").write_text("100000")
        yield groups
    finally:
        for g in groups:
            with contextlib.suppress(OSError):
                for pid in (g / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), 9)
                time.sleep(0.5)
                g.rmdir()


def set_memory_limit(groups: list[Path], limit: int) -> None:
    """The memory limit of `groups` (from limited_cgroups), swap included."""
    for d in groups:
        for name in ("memory.max", "memory.limit_in_bytes"):
            if (d / name).exists():
                (d / name).write_text(str(limit))
        for name in ("memory.swap.max", "memory.memsw.limit_in_bytes"):
            with contextlib.suppress(OSError):  # no swap accounting
                (d / name).write_text("0" if name == "memory.swap.max" else str(limit))


def memory_used(groups: list[Path]) -> int:
    """What `groups` hold now, as their memory limit counts it (page cache included)."""
    for d in groups:
        for name in ("memory.current", "memory.usage_in_bytes"):
            with contextlib.suppress(OSError, ValueError):
                return int((d / name).read_text())
    raise OSError(f"no memory controller in {groups}")


def _cgroup_peak(groups: list[Path]) -> tuple[int, int]:
    """The memory peak the kernel counted (page cache included) and its OOM kills."""
    peak, kills = 0, 0
    for d in groups:
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            with contextlib.suppress(OSError, ValueError):
                peak = max(peak, int((d / name).read_text()))
        kills += oom_kill_count(d) or 0
    return peak, kills


def join_cgroups(groups: list[Path], pid: int) -> None:
    """Process `pid` joins `groups`; the children it starts from then on join with it."""
    for g in groups:
        (g / "cgroup.procs").write_text(str(pid))


def _joining(groups: list[Path]):
    """A preexec_fn: the child joins `groups` (and its children with it)."""
    return lambda: join_cgroups(groups, os.getpid())


# What holds a notebook's memory, by process (the name, or for Python the module it runs).
MEMORY_PARTS = {
    "evcxr and its rust-analyzer": lambda name, argv: name.startswith("evcxr"),
    "the kernels' IPython and PyTorch": lambda name, argv: "coursekit.kernel" in argv,
    "cargo, rustc and linkers": lambda name, argv: name in LINKERS or name.startswith(("rustc", "cargo")),
}


def _memory_part(proc) -> str:
    name, argv = proc.name(), " ".join(proc.cmdline())
    return next((part for part, match in MEMORY_PARTS.items() if match(name, argv)), "the rest")


def bench_binder(scratch: Path, runs: dict[str, list[str]] = BINDER_RUNS) -> dict:
    """Each run (lessons are run, others checked) in a cgroup with Binder's limits: did it
    run, how long, its memory peak (the cgroup's, page cache included, and the largest sum of
    its processes' RSS), the OOM kills, and what held the memory at the largest sum of PSS
    (shared pages split between the processes sharing them). A run that did not fit runs again
    without the memory limit, to show what it needs."""
    results = {}
    for label, paths in runs.items():
        results[label] = _binder_run(scratch, paths, BINDER_MEMORY)
        print(f"[bench] binder: {label}: {results[label]}", flush=True)
        if results[label]["oom_kills"]:
            unlimited = f"{label}, without the memory limit"
            results[unlimited] = _binder_run(scratch, paths, 64 << 30)
            print(f"[bench] binder: {unlimited}: {results[unlimited]}", flush=True)
    return results


def _binder_run(scratch: Path, paths: list[str], memory: int) -> dict:
    import psutil

    procs = []
    started = time.monotonic()
    with limited_cgroups(f"bench-binder-{os.getpid()}-{time.monotonic_ns()}", memory) as groups:
        for rel in paths:
            copy = scratch / "binder" / rel  # a copy: `coursekit run` saves in place
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, copy)
            verb = "run" if rel.startswith("course/") else "check"
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "coursekit", verb, str(copy)],
                    cwd=ROOT,
                    env=dict(os.environ, COURSEKIT_STATE=str(scratch / "binder" / "progress.json")),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    preexec_fn=_joining(groups),
                )
            )
        rss_peak, pss_peak, parts, ended = 0, 0, {}, {}
        while any(p.poll() is None for p in procs):
            for i, p in enumerate(procs):
                if p.returncode is not None:
                    ended.setdefault(i, time.monotonic() - started)
            tree = []
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    root = psutil.Process(p.pid)
                    tree += [root, *root.children(recursive=True)]
            rss, pss = 0, dict.fromkeys([*MEMORY_PARTS, "the rest"], 0)
            for proc in tree:
                with contextlib.suppress(psutil.Error):
                    memory_info = proc.memory_full_info()
                    rss += memory_info.rss
                    pss[_memory_part(proc)] += memory_info.pss
            rss_peak = max(rss_peak, rss)
            if sum(pss.values()) > pss_peak:
                pss_peak, parts = sum(pss.values()), pss
            time.sleep(0.5)
        seconds = time.monotonic() - started
        outputs = [p.stdout.read() for p in procs]
        peak, kills = _cgroup_peak(groups)
    outcomes = [
        _outcome(p.returncode, out, ended.get(i, seconds))
        for i, (p, out) in enumerate(zip(procs, outputs, strict=True))
    ]
    ran = all(o == "ran" for o in outcomes)
    return {
        "ran": ran,
        "outcomes": dict(zip(paths, outcomes, strict=True)),
        "seconds": seconds,
        "cgroup_peak_bytes": peak,
        "rss_peak_bytes": rss_peak,
        "oom_kills": kills,
        "pss_peak_parts": parts,
        "tail": "" if ran else "\n".join(out[-1500:] for out in outputs),
    }


def _ran(run: dict) -> str:
    """The table's "ran" column: yes, or how each notebook of the run ended."""
    if run["ran"]:
        return "yes"
    outcomes = run.get("outcomes")
    if not outcomes or len(outcomes) == 1:
        return "NO" + (f": {next(iter(outcomes.values()))}" if outcomes else "")
    return "NO: " + "; ".join(
        f"{'lesson' if p.startswith('course/') else 'check'}: {o}" for p, o in outcomes.items()
    )


def _outcome(returncode: int, output: str, seconds: float) -> str:
    """How a `coursekit run` or `check` ended, in words."""
    if returncode == 0 or "tasks pass" in output:  # a check of an unsolved exercise exits 1
        return "ran"
    if returncode == 3 and "not checked: memory ran out" in output:
        return f"stopped after {seconds:.0f} s: memory ran out, and it said so"
    return f"failed after {seconds:.0f} s (exit status {returncode})"


def bench_setup(scratch: Path) -> float:
    """`make setup` in a fresh clone with a fresh HOME (empty pip, cargo and evcxr caches)."""
    clone = scratch / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    home = scratch / "home"
    home.mkdir()
    started = time.monotonic()
    subprocess.run(["make", "setup"], cwd=clone, env=_fresh_home_env(home), check=True)
    return time.monotonic() - started


def _fresh_home_env(home: Path, bin_dir: Path | None = None) -> dict:
    """This environment with `home` as HOME and for cargo's and the caches' files (the Rust
    toolchain stays rustup's); `bin_dir` first on PATH after cargo's."""
    first = [str(home / ".cargo" / "bin")] + ([str(bin_dir)] if bin_dir else [])
    env = dict(
        os.environ,
        HOME=str(home),
        CARGO_HOME=str(home / ".cargo"),
        RUSTUP_HOME=os.environ.get("RUSTUP_HOME", str(Path.home() / ".rustup")),
        PATH=":".join([*first, os.environ["PATH"]]),
        XDG_CACHE_HOME=str(home / ".cache"),
    )
    for name in ("XDG_CONFIG_HOME", "COURSEKIT_POOL", "CCACHE_DIR", "VIRTUAL_ENV"):
        env.pop(name, None)
    return env


IMAGE_STEP = re.compile(r"^\s*(\w+) in warm directory \d+: (\d+) s$")


def bench_image(scratch: Path) -> dict:
    """Binder's postBuild (`COURSEKIT_SLOTS=1 python -m coursekit setup`, binder/postBuild) with
    empty cargo, evcxr and ccache caches: the time of each step and the size of what it adds.
    It runs with this environment's packages but writes its kernelspecs into a scratch
    environment and everything else under a scratch HOME. The conda part of the image build
    (Python, PyTorch, Rust) is not measured: no conda channel is reachable here."""
    home, venv = scratch / "image-home", scratch / "image-venv"
    home.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    ours = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    site_dir = next((venv / "lib").glob("python3*/site-packages"))
    (site_dir / "coursekit-bench.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    env = {**_fresh_home_env(home, venv / "bin"), "COURSEKIT_SLOTS": "1"}
    started = time.monotonic()
    steps, last, last_line = {}, started, "start"
    with subprocess.Popen(
        [str(venv / "bin" / "python"), "-m", "coursekit", "setup"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        for raw in proc.stdout:
            line = raw.rstrip("\n").split("\r")[-1]
            print(f"[bench] image: {line}", flush=True)
            if m := IMAGE_STEP.match(line):  # one framework compiled (prewarm prints its time)
                steps[f"compiling {m[1]}"] = float(m[2])
            elif line.startswith("[coursekit setup]"):
                now = time.monotonic()
                if "building evcxr_jupyter" in last_line:
                    steps["building evcxr_jupyter"] = now - last
                last, last_line = now, line
    if proc.returncode:
        raise RuntimeError(f"the image's set-up failed (exit {proc.returncode})")
    total = time.monotonic() - started
    steps["the rest (std sources, kernelspecs, settings, stand-ins)"] = total - sum(steps.values())
    sizes = {
        "evcxr_jupyter": home / ".cargo" / "bin",
        "crate sources (cargo registry)": home / ".cargo" / "registry",
        "warm build directory and stand-ins": home / ".cache" / "coursekit",
        "evcxr's dependency cache": home / ".cache" / "evcxr",
        "ccache": home / ".cache" / "ccache",
    }
    added = {name: slots.size(path) for name, path in sizes.items() if path.exists()}
    added["all of it (HOME)"] = slots.size(home)
    return {
        "seconds": round(total, 1),
        "cores": os.cpu_count(),
        "steps": {k: round(v, 1) for k, v in steps.items()},
        "bytes": added,
    }


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem = (
        int(
            next(
                line.split()[1]
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            )
        )
        / 2**20
    )
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.platform()}, {pins.rustc_banner()}, "
        f"evcxr_jupyter {evcxr_build.installed_version()}"
    )


def write_results(
    frameworks: dict,
    overhead: dict,
    grading: dict | None,
    setup_s: float | None,
    tests: dict | None = None,
    binder: dict | None = None,
    measured: dict | None = None,
    startup: dict | None = None,
    image: dict | None = None,
    loop: dict | None = None,
) -> Path:
    measured = measured or {}

    def when(part: str) -> list[str]:
        return [f"Measured {measured[part]}.", ""] if part in measured else []

    out = ROOT / "bench" / "results.md"
    out.parent.mkdir(exist_ok=True)
    lines = [
        "# Benchmark results",
        "",
        f"Last run on: {machine()}, {date.today().isoformat()}.",
        "Written by `make bench` (`coursekit bench`; `--only PART` re-measures one part and keeps "
        "the others, so each part says when and where it was measured); every figure below was "
        "measured by it. "
        f"Latencies are medians of {REPEATS} runs, seconds of wall time from execute request to reply.",
        "",
        "## Compile and first cells, per framework",
        "",
        *when("frameworks"),
        "| framework | cold compile (evcxr defaults) | compile with the dependency cache | "
        "open notebook → first result (warm) | `:dep` cell (warm) | first code cell (warm) | "
        "JupyterLab: background warm-up | JupyterLab: `:dep` cell + first code cell |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fw, r in frameworks.items():
        lines.append(
            f"| {fw} | {r['cold_compile_s']:.1f} s | {r['cached_compile_s']:.1f} s | "
            f"{r['warm_open_to_first_result_s']:.1f} s | {r['warm_dep_cell_s']:.2f} s | "
            f"{r['warm_first_cell_s']:.2f} s | {r['lab_warm_up_s']:.1f} s | "
            f"{r['lab_dep_cell_s']:.2f} s + {r['lab_first_cell_s']:.2f} s |"
        )
    lines += [
        "",
        "Cold: evcxr as it comes (no `:cache`, a fresh build directory, `:linker system`, no ccache, "
        "empty caches; crate sources already downloaded). With the dependency cache: the course's "
        "`:cache` and ccache, but a fresh build directory, as a kernel gets when every warm directory "
        "is taken. Warm: the course's settings — a prewarmed build directory (`coursekit/slots.py`) — "
        "with the cells run right after the kernel starts, as the tests do: most of that time is "
        "evcxr's embedded rust-analyzer indexing the framework's sources, which no cache keeps "
        "between sessions. JupyterLab: the kernel knows its notebook and runs the first cell's "
        "`:dep` lines in the background; the learner's cells run once that is done. "
        "Goal: warm first cell ≤ 5 s.",
        "",
    ]
    if startup:
        fws = list(startup)
        phases = list(dict.fromkeys(p for fw in fws for p in startup[fw]))
        phases.sort(key=lambda p: p.startswith("kernel start to first result"))  # the sums last
        lines += [
            "## From kernel start to the first framework cell's result: where the time goes",
            "",
            *when("startup"),
            "| | " + " | ".join(fws) + " |",
            "|---|" + "---|" * len(fws),
            *(
                f"| {phase} | "
                + " | ".join(f"{startup[fw][phase]:.1f} s" if phase in startup[fw] else "—" for fw in fws)
                + " |"
                for phase in phases
            ),
            "",
            "As the lessons' tests pay it: a fresh `rust-pytorch` kernel in a warm build "
            "directory, no background warm-up, then the notebook's `:dep` cell and a first small "
            "cell. Each cell's time is split by sampling the kernel's processes every "
            "0.1 s and naming the first that was busy of: rustc; a linker; a build script; cargo "
            "alone (`cargo metadata` for evcxr's analyzer, checking which crates are fresh); the "
            "runner executing the cell's code; evcxr alone (its embedded rust-analyzer reading "
            "the crate graph's sources and typing the cell's variables, loading the compiled "
            "cell). Goal: ≤ 10 s from kernel start to the first result. What bounds it is evcxr "
            "alone: its analyzer parses the sources of the framework's whole crate graph "
            "and indexes it once per kernel, and keeps nothing between kernels. The course's "
            "evcxr (`coursekit/setup/evcxr.patch`) indexes a new crate graph on all cores at once "
            "and in the background: the `:dep` cell returns while it indexes, and the first cell "
            "waits only for what is left. It checks no pinned `:dep` line with a `cargo "
            "metadata` of its own, and while the crates stay the same it compiles a cell with the "
            "rustc command cargo last ran instead of running cargo. The next-to-last row is the "
            "same kernel with all of that switched off, as evcxr 0.22 does it (one crate at a "
            "time, inside the first queries; on one CPU, as on Binder, the indexing is the same). "
            "It reads a lean copy of the standard library's sources (`coursekit/setup/rust_src.py`: "
            "no x86 intrinsics, no library workspace), which cut this by 3-6 s per framework. The "
            "last row is what `coursekit check`, Validate and graded runs pay: their kernels set "
            "`EVCXR_LAZY_ANALYSIS=1` (evcxr.patch), so the analyzer indexes nothing until a cell "
            "has a variable whose type it must infer, and a test, run inside the harness's "
            "closure, has none.",
            "",
        ]
    if loop:
        lines += [
            "## The learner's loop: `coursekit check` and `coursekit watch`",
            "",
            *when("loop"),
            "| framework | `check` of the unsolved tensor exercise: first verdict, all | "
            "`watch`: after a save, first verdict, all | score after the save |",
            "|---|---|---|---|",
            *(
                f"| {fw} | {r['check_first_s']:.1f} s, {r['check_s']:.1f} s | "
                f"{r['watch_first_s']:.1f} s, {r['watch_s']:.1f} s | {r['watch_score']} |"
                for fw, r in loop.items()
            ),
            "",
            "Warm caches; seconds from the command's start (`check`: the median of "
            f"{CHECK_RUNS} runs) or from the save (`watch`) "
            "to the first test's verdict line and to the score line. `check` starts its kernel "
            "before nbgrader, which it then runs in: the kernel loads the notebook's crates while "
            "nbgrader starts (its analyzer indexes none of them: the start-up profile's last "
            "row). The notebook's PyTorch cells run, and each Rust cell is compiled by rustc "
            "alone, not by cargo (evcxr.patch): before those two changes, Burn's check took 17.7 "
            "s (2026-12-07). After each verdict `watch` "
            "starts the next check's kernel, which loads the crates while the learner edits; "
            f"here the solved notebook is saved {EDIT_S} s after the first verdicts, and its check "
            "runs in that kernel. Goals: ≤ 15 s for a framework exercise's check, the first "
            "verdict within that.",
            "",
        ]
    lines += [
        "## Small-cell latency: course settings vs evcxr defaults",
        "",
        "| framework | evcxr defaults | course settings | ratio |",
        "|---|---|---|---|",
    ]
    for fw, r in frameworks.items():
        lines.append(
            f"| {fw} | {r['defaults_cell_s']:.2f} s | {r['course_cell_s']:.2f} s | "
            f"{r['course_cell_s'] / r['defaults_cell_s']:.2f}× |"
        )
    lines += [
        "",
        "A small tensor cell (build a 2×2 tensor, matmul, sum) after the framework is loaded. "
        "Goal: ≤ 0.5× the default latency.",
        "",
        "## Kernel overhead: rust-pytorch vs bare evcxr",
        "",
        *when("overhead"),
        "| kernel | median cell latency |",
        "|---|---|",
        f"| rust (evcxr alone) | {overhead['rust']:.3f} s |",
        f"| rust-pytorch | {overhead['rust-pytorch']:.3f} s |",
        "",
        f"Overhead: {overhead['overhead'] * 100:+.1f}% on three dependency-free Rust cells (goal ≤ 5%).",
    ]
    if grading:
        lines += [
            "",
            "## Grading throughput",
            "",
            *when("grading"),
            "| batch | grader | time for the batch | submissions per minute |",
            "|---|---|---|---|",
        ]
        for g in grading:
            batch = f"{g['students']} × `{g['notebook']}`"
            lines += [
                f"| {batch} | `nbgrader autograde`, sequential, no sandbox | {g['nbgrader_s']:.0f} s | "
                f"{g['nbgrader_per_min']:.2f} |",
                f"| {batch} | `coursekit grade`, sandboxed, {g['jobs']} jobs | {g['coursekit_s']:.0f} s | "
                f"{g['coursekit_per_min']:.2f} |",
            ]
        lines += [
            "",
            "Half of each batch is solved. Speed-up (goal ≥ 2×): "
            + "; ".join(f"`{g['notebook']}` {g['nbgrader_s'] / g['coursekit_s']:.2f}×" for g in grading)
            + ".",
        ]
        profiled = [g for g in grading if g.get("profile")]
        if profiled:
            lines += [
                "",
                "Where one `coursekit grade` job's seconds go (mean over the batch's jobs, "
                f"{profiled[0]['jobs']} running at once):",
                "",
                "| phase | " + " | ".join(f"`{g['notebook']}`" for g in profiled) + " |",
                "|---|" + "---|" * len(profiled),
            ]
            for phase in profiled[0]["profile"]:
                cells = " | ".join(f"{g['profile'].get(phase, 0):.1f} s" for g in profiled)
                lines.append(f"| {phase} | {cells} |")
            lines.append("| the whole job | " + " | ".join(f"{g['job_s']:.1f} s" for g in profiled) + " |")
            lines += [
                "",
                "The bound: with every core busy, the speed-up cannot pass cores × (nbgrader's "
                "time per notebook) ÷ (a coursekit job's time) — "
                + "; ".join(
                    f"`{g['notebook']}` {g['jobs']} × {g['nbgrader_s'] / g['students']:.1f} s ÷ "
                    f"{g['job_s']:.1f} s = {g['jobs'] * g['nbgrader_s'] / g['students'] / g['job_s']:.2f}×"
                    for g in profiled
                )
                + f". Beyond {profiled[0]['jobs']}× on {profiled[0]['jobs']} cores a job must cost less "
                "than nbgrader's own run of the notebook; the phases above that nbgrader alone "
                "does not have (preparing and removing the job, its sandbox, feedback) are that "
                "margin. A job's nbgrader runs (autograde, feedback) are forked from a server that "
                "imported nbgrader once per batch, not started as commands (2 s of imports each).",
            ]
    if binder:
        lines += [
            "",
            "## Within Binder's limits (2 GiB of memory, 1 CPU)",
            "",
            *when("binder"),
            "| what runs | ran | time | memory peak (cgroup, page cache included) | largest sum of RSS "
            "| OOM kills |",
            "|---|---|---|---|---|---|",
            *(
                f"| {label} | {_ran(r)} | {r['seconds']:.0f} s | "
                f"{r['cgroup_peak_bytes'] / 2**30:.2f} GiB | {r['rss_peak_bytes'] / 2**30:.2f} GiB | "
                f"{r['oom_kills']} |"
                for label, r in binder.items()
            ),
            "",
            "Each row runs in a cgroup limited to 2 GiB (no swap) and one CPU's time, as "
            "mybinder.org's pods are, with this machine's warm build directories (Binder's image "
            "has them too); a run that did not fit runs again without the memory limit. In the "
            "check-beside rows the check runs while the lesson's kernel is alive, as a learner "
            "would run it in a terminal beside the open lesson; where memory runs out, the "
            "system stops the check's kernel, which volunteers (`oom_score_adj`), and the lesson "
            "runs on. The cgroup's peak counts page "
            "cache, which the kernel gives back under the limit; the RSS sum counts shared pages "
            "once per process.",
            "",
            "What held the memory at each run's largest sum of PSS (shared pages split between "
            "the processes that share them):",
            "",
            f"| what runs | PSS | {' | '.join([*MEMORY_PARTS, 'the rest'])} |",
            "|---|---|" + "---|" * (len(MEMORY_PARTS) + 1),
            *(
                f"| {label} | {sum(parts.values()) / 2**30:.2f} GiB | "
                + " | ".join(f"{b / 2**30:.2f} GiB" for b in parts.values())
                + " |"
                for label, r in binder.items()
                if (parts := r.get("pss_peak_parts"))
            ),
            "",
            "A lesson's evcxr holds its own rust-analyzer's index of the framework's crate graph "
            "and the standard library: nothing of it is shared between two kernels. A check's "
            "evcxr holds none: its kernel sets `EVCXR_LAZY_ANALYSIS` (coursekit/setup/evcxr.patch), "
            "and the tests, run inside the harness's closure, give the analyzer no type to infer.",
        ]
    if image:
        lines += [
            "",
            "## Binder's image build (postBuild)",
            "",
            *when("image"),
            "`binder/postBuild` — `COURSEKIT_SLOTS=1 python -m coursekit setup` — with empty cargo, "
            f"evcxr and ccache caches: {image['seconds'] / 60:.1f} min on {image['cores']} cores "
            "(mybinder.org kills a build after 60 min; its builders have more cores). The conda "
            "environment before it (Python, PyTorch, Rust; binder/environment.yml) is not measured: "
            "no conda channel is reachable here. Each step includes downloading its crates.",
            "",
            "| step | time |",
            "|---|---|",
            *(f"| {step} | {sec / 60:.1f} min |" for step, sec in image["steps"].items()),
            "",
            "| what it adds to the image | size |",
            "|---|---|",
            *(f"| {what} | {b / 2**30:.2f} GiB |" for what, b in image["bytes"].items()),
        ]
    if setup_s is not None:
        lines += [
            "",
            "## Set-up",
            "",
            f"`make setup` on a fresh clone with a fresh HOME (no pip, cargo, evcxr or ccache "
            f"caches; Debian packages already installed): {setup_s / 60:.1f} min.",
        ]
    if tests:
        lines += [
            "",
            "## Test suite: time per module",
            "",
            f"The last whole `make test` here ({tests['finished']}): {tests['wall_s'] / 60:.1f} min of wall "
            f"time on {tests['workers']} workers, {tests['passed']} passed, {tests['failed']} failed. "
            "Seconds summed over each module's tests (set-up and teardown included); recorded by "
            "conftest.py at the end of every whole run, copied here by `make bench`.",
            "",
            "| module | seconds |",
            "|---|---|",
            *(f"| `{m}` | {s:.0f} |" for m, s in tests["modules"].items() if s >= 1),
        ]
    out.write_text("\n".join(lines) + "\n")
    (out.with_suffix(".json")).write_text(
        json.dumps(
            {
                "machine": machine(),
                "frameworks": frameworks,
                "kernel_overhead": overhead,
                "grading": grading,
                "setup_s": setup_s,
                "tests": tests,
                "binder": binder,
                "startup": startup,
                "loop": loop,
                "image": image,
                "measured": measured,
            },
            indent=1,
        )
        + "\n"
    )
    return out


PARTS = (
    "frameworks",
    "startup",
    "loop",
    "overhead",
    "grading",
    "binder",
    "image",
)  # also `coursekit bench --only`'s choices (cli.py)


def bench(
    with_setup: bool = False, frameworks: list[str] | None = None, parts: list[str] | None = None
) -> Path:
    """Measure `parts` (all by default) and write the results; figures of parts not measured
    now are kept from the previous results file."""
    parts = parts or list(PARTS)
    try:
        previous = json.loads((ROOT / "bench" / "results.json").read_text())
    except (OSError, ValueError):
        previous = {}
    scratch = Path(tempfile.mkdtemp(prefix="coursekit-bench-"))
    measured = dict(previous.get("measured") or {})
    today = f"{date.today().isoformat()} on {machine()}"
    for part in parts:
        measured[part] = today

    def per_framework(part: str, what: str, measure) -> dict:
        """The part's figures per framework: measured now if asked for, else the previous."""
        found = dict(previous.get(part) or {})
        for fw in (frameworks or list(pins.frameworks())) if part in parts else []:
            print(f"[bench] {what}: {fw} ...", flush=True)
            found[fw] = measure(fw)
            print(f"[bench] {fw}: {found[fw]}", flush=True)
        return found

    try:
        rows = per_framework("frameworks", "compile and first cells", lambda fw: bench_framework(fw, scratch))
        overhead = previous.get("kernel_overhead")
        if "overhead" in parts:
            print("[bench] kernel overhead ...", flush=True)
            overhead = bench_kernel_overhead()
        grading = previous.get("grading")
        if isinstance(grading, dict):  # results written before grading had two batches
            grading = [{"notebook": "01_rust/01_values_moves_clone", **grading}]
        if "grading" in parts:
            print("[bench] grading throughput ...", flush=True)
            grading = [bench_grading(scratch, *graded) for graded in GRADED]
        startup = per_framework("startup", "start-up profile", bench_startup)
        loop = per_framework("loop", "the learner's loop", lambda fw: bench_loop(fw, scratch))
        binder = previous.get("binder")
        if "binder" in parts:
            print("[bench] within Binder's limits ...", flush=True)
            binder = bench_binder(scratch)
        image = previous.get("image")
        if "image" in parts:
            print("[bench] Binder's image build (postBuild) ...", flush=True)
            image = bench_image(scratch)
        setup_s = bench_setup(scratch) if with_setup else previous.get("setup_s")
        try:  # the last whole test run (conftest.py)
            tests = json.loads((ROOT / ".coursekit" / "test-times.json").read_text())
        except (OSError, ValueError):
            tests = previous.get("tests")
        return write_results(rows, overhead, grading, setup_s, tests, binder, measured, startup, image, loop)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
