"""The shipped binary (issue 14, section 2): the digits MLP trained in PyTorch, exported as
safetensors, classified by the pure-Rust program in ship/ (Candle), built with its own
Cargo.lock. The tch binary needs libtorch at run time; ship/measure.py builds and measures
it (bench/shipping.md says why it is not built here)."""

from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.full

SHIP = ROOT / "ship"


def _measure_module():
    spec = importlib.util.spec_from_file_location("ship_measure", SHIP / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """PyTorch's model and test images exported to a temporary folder, and the Candle binary
    built from ship/ (`cargo build --locked`: the dev profile, which compiles in a fraction of
    the release build's time, overflow checks on; ship/measure.py builds and measures the
    release binary. The target directory is kept under ~/.cache/coursekit/ship-target, so a
    rerun only checks it)."""
    measure = _measure_module()
    work = tmp_path_factory.mktemp("ship")
    ref = measure.export(work)
    binary, _ = measure.build("digits-candle", timeout=1200, release=False)
    return {"work": work, "binary": binary, **ref}


def _run(binary, *args, stdin=None):
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}  # needs no libtorch
    cmd = [str(binary), *map(str, args)]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=120)


def _classes(proc) -> list[int]:
    assert proc.returncode == 0, f"the binary failed ({proc.returncode}): {proc.stderr}"
    return [int(v) for v in proc.stdout.split()]


def test_lock_file_is_committed_and_pins_candle():
    lock = (SHIP / "Cargo.lock").read_text()
    assert 'name = "candle-core"\nversion = "0.9.2"' in lock
    assert 'name = "tch"\nversion = "0.24.0"' in lock
    assert "/target/" in (SHIP / ".gitignore").read_text()


def test_binary_prints_pytorchs_classes_for_the_test_split(shipped):
    weights, csv = shipped["work"] / "digits.safetensors", shipped["work"] / "test.csv"
    got = _classes(_run(shipped["binary"], "--weights", weights, "--csv", csv))
    assert len(got) == len(shipped["labels"]) == 450
    diff = [i for i, (g, e) in enumerate(zip(got, shipped["pred"], strict=True)) if g != e]
    assert not diff, f"classes differ from PyTorch's at test images {diff[:10]}"
    accuracy = sum(g == t for g, t in zip(got, shipped["labels"], strict=True)) / len(got)
    assert accuracy == shipped["accuracy"]
    assert accuracy > 0.95, f"the PyTorch model is undertrained: accuracy {accuracy}"


def test_rows_on_the_command_line_and_stdin(shipped):
    """Raw load_digits pixels (0-16) with --scale 16, as arguments and on stdin."""
    x = shipped["x_test"][:3]
    raw = [",".join(str(int(v * 16)) for v in row) for row in x]
    weights = shipped["work"] / "digits.safetensors"
    args = ["--weights", weights, "--scale", "16"]
    assert _classes(_run(shipped["binary"], *args, *raw)) == shipped["pred"][:3]
    proc = _run(shipped["binary"], *args, "--csv", "-", stdin="\n".join(raw) + "\n")
    assert _classes(proc) == shipped["pred"][:3]


def test_missing_weights_file_is_a_clear_error(shipped):
    missing = shipped["work"] / "no_such_weights.safetensors"
    proc = _run(shipped["binary"], "--weights", missing, "--csv", shipped["work"] / "test.csv")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "no_such_weights.safetensors" in proc.stderr and "No such file" in proc.stderr, proc.stderr
    assert "panicked" not in proc.stderr


def test_misnamed_or_misshaped_weights_are_a_clear_error(shipped):
    from safetensors.torch import save_file

    state = shipped["model"].state_dict()
    misnamed = shipped["work"] / "misnamed.safetensors"  # a model with attributes fc1/fc2
    save_file({k.replace("0.", "fc1.").replace("2.", "fc2."): v for k, v in state.items()}, misnamed)
    proc = _run(shipped["binary"], "--weights", misnamed, "--csv", shipped["work"] / "test.csv")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "misnamed.safetensors" in proc.stderr and '"0.weight"' in proc.stderr, proc.stderr
    assert "fc1.weight" in proc.stderr, "the message lists the tensors the file has"

    transposed = shipped["work"] / "transposed.safetensors"
    save_file({k: v.T.contiguous() if k == "2.weight" else v for k, v in state.items()}, transposed)
    proc = _run(shipped["binary"], "--weights", transposed, "--csv", shipped["work"] / "test.csv")
    assert proc.returncode == 1
    assert "transposed.safetensors" in proc.stderr and "[64, 10]" in proc.stderr and "[10, 64]" in proc.stderr


def test_bad_input_is_a_usage_error(shipped):
    weights = shipped["work"] / "digits.safetensors"
    proc = _run(shipped["binary"], "--weights", weights, "1,2,3")
    assert proc.returncode == 2 and "3 numbers, expected 64" in proc.stderr
    proc = _run(shipped["binary"], "--weights", weights)
    assert proc.returncode == 2 and "no input" in proc.stderr
