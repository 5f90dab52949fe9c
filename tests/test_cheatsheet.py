"""The PyTorch → Rust cheat-sheet (issue: Part 2 overview and a parity-checked cheat-sheet).

Quick tier: the page is exactly what the checked rows render to, and the rows cover what the
course promises. Full tier: every row runs in each framework and matches PyTorch.
"""

from __future__ import annotations

import math
import re

import pytest

from coursekit import pins
from coursekit.content import cheatsheet
from coursekit.content.cheatsheet import FRAMEWORKS, ROWS

# The operations the cheat-sheet must cover (row names).
REQUIRED = [
    *["zeros", "ones", "full", "arange", "eye", "tensor from data"],
    *["reshape", "transpose (2-D)", "permute", "unsqueeze", "squeeze a dim", "flatten", "narrow", "slice"],
    *["index_select", "cat", "stack", "chunk", "split", "expand"],
    *["add", "sub", "mul", "div", "neg", "abs", "exp", "log", "sqrt", "pow (float exponent)", "clamp"],
    *["relu", "sigmoid", "tanh", "broadcast a row vector", "comparison → float mask", "where", "masked_fill"],
    *["sum", "sum over a dim", "mean", "mean over a dim, keepdim", "max", "argmax over a dim", "min"],
    *["matmul", "batched matmul", "softmax", "log_softmax", "float → int (truncates)", "cumsum", "gather"],
]


def test_page_is_rendered_from_the_checked_rows():
    assert cheatsheet.PAGE.read_text() == cheatsheet.render_markdown(), (
        "course/02_tensors/cheatsheet.md is stale: run `python -m coursekit cheatsheet --write`"
    )
    table_rows = [line for line in cheatsheet.PAGE.read_text().splitlines() if line.startswith("| `")]
    assert len(table_rows) == len(ROWS)
    for line in table_rows:  # five cells: no code's `|` may split a cell
        assert len(re.findall(r"(?<!\\)\|", line)) == 6, line


def test_rows_cover_the_required_operations_in_every_framework():
    names = [row.name for row in ROWS]
    assert len(ROWS) >= 40
    assert len(set(names)) == len(names), "row names must be unique"
    assert not set(REQUIRED) - set(names)
    for row in ROWS:
        for fw in FRAMEWORKS:
            entry = row.code(fw)
            assert entry.code.strip(), f"{row.name}: no {fw} code (a missing op needs its workaround)"
            assert not (entry.shape is not None and not entry.note), f"{row.name}/{fw}: explain the shape"
            assert not entry.ret or fw == "dfdx", f"{row.name}/{fw}: `ret` is for DFDX only"


def test_pytorch_side_evaluates_and_shape_exceptions_are_real():
    for row in ROWS:
        shape, values = cheatsheet.torch_result(row)
        assert len(values) == math.prod(shape), row.name
        for fw in FRAMEWORKS:
            declared = row.code(fw).shape
            assert declared is None or list(declared) != shape, f"{row.name}/{fw}: `shape` equals PyTorch's"


def test_programs_run_the_code_the_table_shows():
    for fw in FRAMEWORKS:
        deps, _helpers, main = cheatsheet.program(fw)
        assert deps == "\n".join(pins.dep_lines(fw))
        for row in ROWS:
            code = row.code(fw).code
            assert f"({code})" in main or f"{{ {code} }}" in main, f"{row.name}/{fw}: not run as shown"


def test_result_lines_parse():
    out = (
        '@@cheatsheet {"name": "sum", "shape": [], "values": [-3.0]}\n'
        "noise\n"
        '@@cheatsheet-error "argmax over a dim" panic: boom\n'
    )
    assert cheatsheet.parse(out) == {
        "sum": {"name": "sum", "shape": [], "values": [-3.0]},
        "argmax over a dim": {"error": "panic: boom"},
    }
    row = next(r for r in ROWS if r.name == "sum")
    assert cheatsheet.compare(row, "tch", {"shape": [], "values": [-3.0]}) is None
    assert "shape" in cheatsheet.compare(row, "tch", {"shape": [1], "values": [-3.0]})
    assert "values" in cheatsheet.compare(row, "tch", {"shape": [], "values": [-2.9]})
    assert cheatsheet.compare(row, "burn", {"shape": [1], "values": [-3.0]}) is None


# One class per framework: `make test` runs xdist with --dist loadscope, which spreads
# classes (not the parameters of one function) over the workers.
class _MatchesPyTorch:
    fw = ""

    @pytest.mark.full
    def test_every_row_matches_pytorch(self):
        problems = cheatsheet.check(self.fw)
        report = "\n".join(f"  {name}: {problem}" for name, problem in problems.items())
        assert not problems, f"{self.fw}: {len(problems)} of {len(ROWS)} rows differ from PyTorch:\n{report}"


class TestTch(_MatchesPyTorch):
    fw = "tch"


class TestCandle(_MatchesPyTorch):
    fw = "candle"


class TestBurn(_MatchesPyTorch):
    fw = "burn"


class TestDfdx(_MatchesPyTorch):
    fw = "dfdx"
