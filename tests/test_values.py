"""Values between Rust and Python, and evcxr's output turned into Jupyter outputs (unit level)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from coursekit.kernel.outputs import MARKER, CellOutputs
from coursekit.kernel.values import parse_debug, rust_binding


@pytest.mark.parametrize(
    "text, value",
    [
        ("42", 42),
        ("-1.5e-7", -1.5e-7),
        ("1_000", 1000),
        ("true", True),
        ('"a \\"q\\"\\n"', 'a "q"\n'),
        ("[1.0, 2.5, -3.0]", [1.0, 2.5, -3.0]),
        ("[[1, 2], [3, 4]]", [[1, 2], [3, 4]]),
        ("(1, \"x\", 'c')", (1, "x", "c")),
        ("Some(3)", 3),
        ("None", None),
        ("Point { x: 1.0, y: -2 }", {"x": 1.0, "y": -2}),
        ("Wrapper(5)", 5),
        ("Relu", "Relu"),
        ("[]", []),
        ("std::cmp::Ordering::Less", "std::cmp::Ordering::Less"),
    ],
)
def test_parse_debug(text, value):
    assert parse_debug(text) == value


def test_parse_debug_special_floats():
    nan, inf, ninf = parse_debug("[NaN, inf, -inf]")
    assert math.isnan(nan) and inf == math.inf and ninf == -math.inf


@pytest.mark.parametrize("text", ["[1, 2", "Point { x 1 }", "1 2", "@"])
def test_parse_debug_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_debug(text)


def test_rust_binding_scalars_and_lists():
    assert rust_binding("lr", 0.5) == "let lr: f64 = 0.5;"
    assert rust_binding("n", 3) == "let n: i64 = 3;"
    assert rust_binding("ok", True) == "let ok: bool = true;"
    assert rust_binding("name", 'a"b') == 'let name: String = String::from("a\\"b");'
    assert rust_binding("xs", [1, 2.5]) == "let xs: Vec<f64> = vec![1.0, 2.5];"
    assert rust_binding("m", [[1, 2], [3, 4]]) == "let m: Vec<Vec<i64>> = vec![vec![1, 2], vec![3, 4]];"
    assert rust_binding("x", float("nan")) == "let x: f64 = f64::NAN;"


def test_rust_binding_arrays_and_tensors():
    expected = "let t: Vec<f32> = vec![0.0, 1.0, 2.0, 3.0];\nlet t_shape: Vec<usize> = vec![2, 2];"
    assert rust_binding("t", torch.arange(4.0).reshape(2, 2)) == expected
    assert rust_binding("t", np.arange(4, dtype=np.float32).reshape(2, 2)) == expected


@pytest.mark.parametrize(
    "name, value", [("Bad", 1), ("x", []), ("x", [1, "a"]), ("x", {1: 2}), ("x", np.zeros(200_000))]
)
def test_rust_binding_rejects(name, value):
    with pytest.raises((ValueError, TypeError)):
        rust_binding(name, value)


def stream(name, text):
    return ("stream", {"name": name, "text": text})


def test_markers_become_outputs_in_order():
    out = CellOutputs()
    msgs = out.translate(
        *stream("stdout", f"a\n{MARKER}stderr - b\\n\nc\n{MARKER}display text/html <b>x</b>\n")
    )
    assert msgs == [
        stream("stdout", "a\n"),
        stream("stderr", "b\n"),
        stream("stdout", "c\n"),
        ("display_data", {"data": {"text/html": "<b>x</b>"}, "metadata": {}}),
    ]
    out.translate(*stream("stdout", f"{MARKER}share losses [1.0, 2.0]\n"))
    assert out.shared == {"losses": "[1.0, 2.0]"}


def test_panic_becomes_an_error_without_backtrace():
    out = CellOutputs()
    text = (
        "thread '<unnamed>' (99) panicked at src/lib.rs:3:1:\nassertion `left == right` failed\n  left: 1\n"
        " right: 2\nstack backtrace:\n   0: std::panicking\n             at /rustc/x\n"
        "note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.\n"
    )
    shown = out.translate(*stream("stderr", text))
    assert "stack backtrace" not in shown[0][1]["text"]
    assert shown[0][1]["text"].startswith("thread '<unnamed>' panicked at src/lib.rs:3:1:\n")
    error = out.outcome("ok", interrupted=False)
    assert error["ename"] == "RustPanic"
    assert error["evalue"] == "assertion `left == right` failed\n  left: 1\n right: 2"


def test_evcxr_errors_get_clear_names():
    compile_error = {"ename": "Error", "evalue": "mismatched types", "traceback": ["[E0308] Error", "│ x"]}
    out = CellOutputs()
    out.translate("error", compile_error)
    assert out.outcome("error", False)["ename"] == "CompileError"
    exited = {
        "ename": "Error",
        "evalue": "Subprocess terminated with status: exit status: 3",
        "traceback": [],
    }
    for interrupted, ename in ((False, "RustProcessExited"), (True, "KeyboardInterrupt")):
        out = CellOutputs()
        out.translate("error", exited)
        assert out.outcome("error", interrupted)["ename"] == ename
    out = CellOutputs()
    out.translate(*stream("stdout", f"{MARKER}error - invalid digit\\n\n"))
    assert out.outcome("ok", False) == {
        "ename": "RustError",
        "evalue": "invalid digit",
        "traceback": ["the cell returned an error with `?`: invalid digit"],
    }
    assert CellOutputs().outcome("ok", False) is None
