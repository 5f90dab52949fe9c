"""Values between Rust and Python, and evcxr's output turned into Jupyter outputs (unit level)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from coursekit.grading.harness import PASS_MIME
from coursekit.kernel.outputs import ERROR_MIME, LAST_MIME, MARKER, SHARE_MIME_PREFIX, CellOutputs
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
    bits = "000000003f8000004000000040400000"  # 0.0, 1.0, 2.0, 3.0 as f32
    expected = (
        f'let t: Vec<f32> = coursekit_prelude::f32s_from_hex("{bits}");\n'
        "let t_shape: Vec<usize> = vec![2, 2];"
    )
    assert rust_binding("t", torch.arange(4.0).reshape(2, 2)) == expected
    assert rust_binding("t", np.arange(4, dtype=np.float32).reshape(2, 2)) == expected
    transposed = rust_binding("t", np.array([[0.0, 2.0], [1.0, 3.0]]).T)  # row-major order
    assert transposed == expected


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
        *stream(
            "stdout",
            f"a\n{MARKER}stderr 01 - b\\n\n{MARKER}stdout 02 - c\\n\n{MARKER}display 03 text/html <b>x</b>\n",
        )
    )
    assert msgs == [
        stream("stdout", "a\n"),
        stream("stderr", "b\n"),
        stream("stdout", "c\n"),
        ("display_data", {"data": {"text/html": "<b>x</b>"}, "metadata": {}}),
    ]


def test_a_cell_is_settled_once_its_last_line_has_come():
    """The ID of a cell's last marker line comes as content, before the reply; lines relayed
    later still count: the kernel waits for exactly that one."""
    out = CellOutputs()
    assert out.settled()  # printed nothing
    out.translate(*stream("stdout", f"{MARKER}stdout 0a - x\\n\n"))
    out.translate("execute_result", {"data": {LAST_MIME: "0b\n"}, "metadata": {}})
    assert not out.settled()
    out.translate(*stream("stdout", f"{MARKER}stdout 0b - y\\n\n"))
    assert out.settled()


def test_shares_and_returned_errors_come_as_content():
    """share() and the error a cell returned with `?` come as evcxr content, which arrives
    before the cell's reply; the harness's proof of a passed test stays in the outputs."""
    out = CellOutputs()
    shown = out.translate(*stream("stderr", "invalid digit\n"))
    result = {
        "data": {
            "text/plain": "3",
            f"{SHARE_MIME_PREFIX}losses": "[1.0, 2.0]",
            f"{SHARE_MIME_PREFIX}a%20b": '"x\\\\ny"',  # Debug of "x\ny", escaped by the prelude
            ERROR_MIME: "invalid digit",
            PASS_MIME: "{}",
        },
        "metadata": {},
    }
    shown = out.translate("execute_result", result)
    assert shown == [("execute_result", {"data": {"text/plain": "3", PASS_MIME: "{}"}, "metadata": {}})]
    assert out.shared == {"losses": "[1.0, 2.0]", "a b": '"x\\ny"'}
    assert out.outcome("ok", False)["ename"] == "RustError"
    # A learner's own eprintln!("{}", error) is only stderr.
    plain = CellOutputs()
    plain.translate(*stream("stderr", "invalid digit\n"))
    assert plain.outcome("ok", False) is None


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


def test_a_compile_error_names_the_line_of_the_cell():
    """evcxr's report starts `╭─[ command_N:1:1 ]` whatever the line; the kernel names the
    line it quotes. A cell that is not pure ASCII gets no report, only the quoted lines."""
    grey = "\x1b[38;5;246m"
    report = [
        "\x1b[31m[E0382] Error:\x1b[0m borrow of moved value: `v`",
        f"   {grey}╭\x1b[0m{grey}─\x1b[0m{grey}[\x1b[0m command_4:1:1 {grey}]\x1b[0m",
        f"   {grey}│\x1b[0m",
        f" {grey}2 │\x1b[0m let w = v;",
        " \x1b[38;5;240m  │\x1b[0m         ╰── value moved here",
        f"   {grey}├\x1b[0m{grey}─\x1b[0m{grey}[\x1b[0m command_4:1:1 {grey}]\x1b[0m",
        f" {grey}1 │\x1b[0m let v = vec![1];",
    ]
    code = 'let v = vec![1];\nlet w = v;\nlet n = 2;\nprintln!("{:?}", v);'
    out = CellOutputs(code=code)
    out.translate("error", {"ename": "Error", "evalue": "borrow of moved value: `v`", "traceback": report})
    shown = out.outcome("error", False)["traceback"]
    assert "line 2 of your cell" in shown[1] and "line 1 of your cell" in shown[5]
    assert not any("command_" in line for line in shown) and shown[3] == report[3]

    code = '// café\nfn f() -> String {\n    let x = 1;\n    "é"\n}'
    quoted = ['    "é"', "\x1b[91m    ^^^\x1b[0m expected `String`, found `&str`", "mismatched types"]
    out = CellOutputs(code=code)
    out.translate("error", {"ename": "Error", "evalue": "mismatched types", "traceback": quoted})
    assert out.outcome("error", False)["traceback"] == ["at line 4 of your cell:"] + quoted


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
    out.translate("execute_result", {"data": {ERROR_MIME: "invalid digit"}, "metadata": {}})
    assert out.outcome("ok", False) == {
        "ename": "RustError",
        "evalue": "invalid digit",
        "traceback": ["the cell returned an error with `?`: invalid digit"],
    }
    assert CellOutputs().outcome("ok", False) is None
