"""`coursekit doctor` on this set-up machine, and with pieces broken on purpose."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import ROOT


def doctor(**env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "coursekit", "doctor"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def test_doctor_passes_on_a_set_up_machine():
    result = doctor()
    assert result.returncode == 0, result.stdout
    assert "all good" in result.stdout
    disk = r"note  disk: build directories \d+\.\d GiB, evcxr.s dependency cache \d+\.\d GiB"
    assert re.search(disk, result.stdout), "doctor reports the caches' sizes"


def test_doctor_reports_missing_evcxr_with_fix(tmp_path):
    result = doctor(CARGO_HOME=str(tmp_path))
    assert result.returncode == 1
    assert "FAIL  evcxr_jupyter missing" in result.stdout
    assert "run `make setup`; it builds the pinned evcxr_jupyter" in result.stdout


def test_doctor_reports_a_shadowing_kernelspec(tmp_path):
    shadow = tmp_path / "kernels" / "rust"
    shadow.mkdir(parents=True)
    (shadow / "kernel.json").write_text(
        json.dumps({"argv": ["false"], "display_name": "x", "language": "rust"})
    )
    result = doctor(JUPYTER_PATH=str(tmp_path))
    assert result.returncode == 1
    assert "FAIL  kernelspec rust at " + str(shadow) in result.stdout
    assert "jupyter kernelspec remove rust" in result.stdout


def test_doctor_reports_a_cold_cache(tmp_path):
    result = doctor(XDG_CACHE_HOME=str(tmp_path))
    assert result.returncode == 1
    assert "FAIL  frameworks prewarmed (cold: tch in directory 0" in result.stdout
