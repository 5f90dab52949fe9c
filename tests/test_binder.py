"""Binder: the Dockerfile repo2docker would build (dry run, no Docker needed), and the heaviest
notebooks within Binder's memory and CPU."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from conftest import ROOT


def test_repo2docker_uses_binder_files():
    repo2docker = Path(sys.executable).parent / "repo2docker"
    result = subprocess.run(
        [str(repo2docker), "--no-build", "--user-id", "1000", "--user-name", "jovyan", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    dockerfile = result.stdout
    assert '--file "binder/environment.yml"' in dockerfile
    assert "RUN ./binder/postBuild" in dockerfile
    assert 'R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile
    assert re.search(r"apt-get install .*bubblewrap ccache mold", dockerfile)


def test_postbuild_and_start():
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "set -euo pipefail" in post and "python -m coursekit setup" in post
    start = (ROOT / "binder" / "start").read_text().strip().splitlines()
    assert start[-1] == 'exec "$@"'


def test_readme_has_binder_badge_and_link():
    readme = (ROOT / "README.md").read_text()
    m = re.search(
        r"\[!\[Binder\]\(https://mybinder.org/badge_logo.svg\)\]\((https://mybinder.org/v2/gh/[^)]+)\)",
        readme,
    )
    assert m, "Binder badge missing"
    target = re.search(r"urlpath=lab/tree/(\S+\.ipynb)", m.group(1))
    assert target and (ROOT / target.group(1)).is_file()


@pytest.mark.full
def test_the_heaviest_notebooks_fit_in_binders_memory(tmp_path):
    """Binder gives a session about 2 GB and one CPU. There, each without an OOM kill (in a
    cgroup limited to 2 GiB, no swap, and one CPU's time): the tch tensor lesson runs to its
    end with `coursekit check` of its solved exercise running beside it, as a learner runs it
    in a terminal, and every task passes; the Burn tensor lesson, the largest, runs; a check
    of the solved Burn exercise passes. bench/results.md has the figures, and the Burn lesson
    with a check beside it, which does not fit (the test below covers what happens then)."""
    from coursekit import bench

    try:
        results = bench.bench_binder(tmp_path, bench.BINDER_TESTED)
    except OSError as exc:  # no writable cgroup file system (not root, or no delegation)
        pytest.skip(f"cannot create a memory-limited cgroup here: {exc}")
    for label in bench.BINDER_TESTED:
        r = results[label]
        assert r["ran"] and not r["oom_kills"], f"{label} did not fit: {r}"


HEADROOM = 500 << 20  # what the limit leaves a check: its own process, not its kernel too


@pytest.mark.full
def test_a_check_that_runs_out_of_memory_stops_itself_not_the_learners_kernel(tmp_path):
    """On Binder a check runs beside the learner's open notebooks, in the same 2 GB. Where
    memory runs out, the system stops the check's kernel, never the learner's, and the check
    says it could not check rather than failing tasks. Here the learner's kernel holds the most
    memory (1 GiB in a Rust variable) and the limit leaves the check HEADROOM: were the check
    not volunteering (oom_score_adj), the system would stop the learner's kernel, the largest."""
    from conftest import KernelSession
    from coursekit import bench

    mine = tmp_path / "01_rust" / "03_errors.ipynb"
    mine.parent.mkdir()
    shutil.copy(ROOT / "solutions" / "01_rust" / mine.name, mine)
    with contextlib.ExitStack() as stack:
        try:
            groups = stack.enter_context(bench.limited_cgroups(f"test-oom-{os.getpid()}", 64 << 30))
        except OSError as exc:  # no writable cgroup file system (not root, or no delegation)
            pytest.skip(f"cannot create a memory-limited cgroup here: {exc}")
        learner = KernelSession(cwd=tmp_path)
        stack.callback(learner.close)
        assert learner.run("let started = 1;").ok  # evcxr and its runner are up
        kernel = psutil.Process(learner.km.provisioner.pid)
        for process in [kernel, *kernel.children(recursive=True)]:
            with contextlib.suppress(ProcessLookupError):  # one that just ended
                bench.join_cgroups(groups, process.pid)
        assert learner.run("let big = vec![1u8; 1 << 30];").ok
        bench.set_memory_limit(groups, bench.memory_used(groups) + HEADROOM)
        checked = subprocess.run(
            [sys.executable, "-m", "coursekit", "check", str(mine)],
            cwd=ROOT,
            env=dict(os.environ, COURSEKIT_STATE=str(tmp_path / "progress.json")),
            capture_output=True,
            text=True,
            timeout=900,
            preexec_fn=bench._joining(groups),
        )
        out = checked.stdout + checked.stderr
        assert checked.returncode == 3 and "not checked: memory ran out" in out, out
        assert "Memory ran out during the check" in out and not re.search(r"PASS|FAIL", out), out
        assert learner.stdout('println!("{}", big.len());') == f"{1 << 30}\n", (
            "the learner's kernel was stopped"
        )
    assert not (tmp_path / "progress.json").exists(), "a check that did not run recorded results"
