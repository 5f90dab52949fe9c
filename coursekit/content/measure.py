"""Measuring the frameworks from a notebook (Part 4's comparison, Part 5's benchmarks).

Each Rust framework runs in a fresh `rust-pytorch` kernel of its own — tch and Burn cannot
even be linked into one crate, and a kernel's peak memory is then the framework's — on one
thread, as PyTorch does with `torch.set_num_threads(1)`. The code measured is taken from
the lessons' cells, so what is timed is what the lessons teach.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from .. import pins

ONE_THREAD = {"RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# The cells measured are compiled with optimisation, as a release build would be: the
# course's kernels compile cells without it (slots.py), and the frameworks' generic code
# (Burn's and DFDX's kernels, instantiated in the cell's crate) then runs far slower.
OPTIMISED = {"CARGO_PROFILE_DEV_OPT_LEVEL": "2"}

# Rust: the median time of `reps` calls after one warm-up call, and the process's peak memory.
TIMING = r"""
fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut times: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let started = std::time::Instant::now();
            f();
            started.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap_or("VmHWM: 0 kB");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
}
"""


def lesson_cell(lesson: str | Path, first_line: str) -> str:
    """The code cell of a lesson that has a line starting with `first_line` (a regex)."""
    cells = nbformat.read(lesson, as_version=4).cells
    for cell in cells:
        if cell.cell_type == "code" and re.search("^" + first_line, cell.source, re.M):
            return cell.source
    raise LookupError(f"{lesson}: no code cell with a line matching {first_line!r}")


def run_rust(framework: str, cells: list[str], timeout: float = 1800) -> dict:
    """Run `cells` after the framework's `:dep` lines and TIMING in a fresh one-thread kernel;
    the last cell's last printed line, read as JSON."""
    from ..kernel.session import KernelSession

    with KernelSession(env={**ONE_THREAD, **OPTIMISED}) as kernel:
        out = ""
        for cell in ["\n".join(pins.dep_lines(framework)), TIMING, *cells]:
            out = kernel.stdout(cell, timeout=timeout)
    return json.loads(out.strip().splitlines()[-1])


def run_python(code: str, timeout: float = 1800) -> dict:
    """Run `code` in a fresh Python process (its peak memory is its own, not the notebook's);
    its last printed line, read as JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=timeout
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
