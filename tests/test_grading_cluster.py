"""`coursekit grade --cluster`: the same batch on the worker processes of a Dask LocalCluster,
one of them killed while it grades; nothing is lost, nothing is graded twice."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time

import nbformat
import psutil
import pytest

from conftest import ROOT

pytestmark = pytest.mark.full

ASSIGNMENT, NOTEBOOK = "01_rust", "01_values_moves_clone.ipynb"
FULL = 7
SCORES = {"ada": FULL, "cy": 0}  # solved; the release as it is


def grade(subs, out, address, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "coursekit", "grade", str(subs), "--out", str(out), "--cluster", address],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def kill_a_worker_mid_job(deadline: float) -> bool:
    """SIGKILL the first Dask worker process seen running a kernel (evcxr)."""
    while time.monotonic() < deadline:
        for worker in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                if any(p.name().startswith("evcxr") for p in worker.children(recursive=True)):
                    os.kill(worker.pid, signal.SIGKILL)
                    return True
        time.sleep(0.5)
    return False


def test_a_dask_cluster_grades_as_local_mode_does_and_survives_a_dead_worker(tmp_path):
    from distributed import LocalCluster

    subs, out = tmp_path / "subs", tmp_path / "out"
    for student, score in SCORES.items():
        source = ROOT / ("solutions" if score else "exercises") / ASSIGNMENT / NOTEBOOK
        dest = subs / student / ASSIGNMENT / NOTEBOOK
        dest.parent.mkdir(parents=True)
        dest.write_text(source.read_text())
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit=0
    ) as cluster:
        proc = grade(subs, out, cluster.scheduler_address)
        killed = kill_a_worker_mid_job(time.monotonic() + 600)
        stdout, _ = proc.communicate(timeout=1800)
        assert proc.returncode == 0, stdout[-3000:]
        assert killed, "no worker was seen grading"
        records = [json.loads(p.read_text()) for p in (out / "results").glob("*/*/*.json")]
        assert {r["student"]: r["score"] for r in records} == SCORES, stdout[-3000:]
        assert all(r["status"] == "ok" and r["key"] for r in records)
        rows = list(csv.DictReader((out / "grades.csv").open()))
        assert sorted(r["student"] for r in rows) == sorted(SCORES), "each notebook graded once"
        for row in rows:
            page = (out / row["feedback"]).read_text()
            assert "<html" in page.lower() and "let empty = scale" not in page, "no hidden tests"
        again = grade(subs, out, cluster.scheduler_address).communicate(timeout=600)[0]
        assert "graded 0 notebook(s)" in again, "a re-run grades only what changed"
        nb = nbformat.read(ROOT / "solutions" / ASSIGNMENT / NOTEBOOK, as_version=4)
        nbformat.write(nb, subs / "cy" / ASSIGNMENT / NOTEBOOK)
        again = grade(subs, out, cluster.scheduler_address).communicate(timeout=900)[0]
        assert "graded 1 notebook(s)" in again, again[-2000:]
    assert (
        json.loads((out / "results" / "cy" / ASSIGNMENT / "01_values_moves_clone.json").read_text())["score"]
        == FULL
    )


def test_no_scheduler_is_a_clear_error(tmp_path):
    (tmp_path / "subs").mkdir()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "coursekit",
            "grade",
            str(tmp_path / "subs"),
            "--cluster",
            "tcp://127.0.0.1:9",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "no Dask scheduler answers at tcp://127.0.0.1:9" in out.stderr, out.stderr
