"""`make bench` without measuring (quick tier): the results page renders from the committed
figures, and every part can be asked for on its own."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT
from coursekit import bench


def test_results_render_from_the_committed_figures(tmp_path, monkeypatch):
    committed = json.loads((ROOT / "bench" / "results.json").read_text())
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    out = bench.write_results(
        committed["frameworks"],
        committed["kernel_overhead"],
        committed.get("grading"),
        committed.get("setup_s"),
        committed.get("tests"),
        committed.get("binder"),
        committed.get("measured"),
        committed.get("startup"),
        committed.get("image"),
        committed.get("loop"),
    )
    page = out.read_text()
    assert "## Compile and first cells, per framework" in page
    for fw in committed["frameworks"]:
        assert f"| {fw} |" in page
    if committed.get("binder"):
        assert "## Within Binder's limits" in page
        for label, run in committed["binder"].items():
            assert f"| {label} | {bench._ran(run)} | {run['seconds']:.0f} s |" in page
            if run.get("pss_peak_parts"):
                assert f"| {label} | {sum(run['pss_peak_parts'].values()) / 2**30:.2f} GiB |" in page
    if committed.get("image"):
        assert "## Binder's image build (postBuild)" in page
    for fw, r in (committed.get("loop") or {}).items():
        assert f"| {fw} | {r['check_first_s']:.1f} s, {r['check_s']:.1f} s |" in page
    for part, when in (committed.get("measured") or {}).items():
        assert f"Measured {when}." in page, part
    assert json.loads(out.with_suffix(".json").read_text())["frameworks"] == committed["frameworks"]


def test_every_part_can_be_measured_alone():
    usage = subprocess.run(
        [sys.executable, "-m", "coursekit", "bench", "--help"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    choices = usage.split("--only {")[1].split("}")[0].split(",")
    assert choices == list(bench.PARTS)


class _Proc:
    def __init__(self, name, *argv):
        self._name, self._argv = name, list(argv)

    def name(self):
        return self._name

    def cmdline(self):
        return self._argv


def test_memory_is_attributed_to_the_process_that_holds_it():
    assert bench._memory_part(_Proc("evcxr_jupyter", "evcxr_jupyter", "--control_file", "x")) == (
        "evcxr and its rust-analyzer"
    )
    kernel = _Proc("python3", "/venv/bin/python", "-m", "coursekit.kernel", "-f", "conn.json")
    assert bench._memory_part(kernel) == "the kernels' IPython and PyTorch"
    assert bench._memory_part(_Proc("rustc", "rustc", "--crate-name", "ctx")) == "cargo, rustc and linkers"
    assert bench._memory_part(_Proc("python3", "python", "-m", "coursekit", "check", "x")) == "the rest"
