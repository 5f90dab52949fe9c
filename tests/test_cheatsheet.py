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
    # torch.nn.functional
    *["leaky_relu", "gelu (tanh approximation)", "silu", "softplus", "elu", "hardtanh"],
    *["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy"],
    *["binary_cross_entropy_with_logits", "cross_entropy (class indices)", "nll_loss", "kl_div (batchmean)"],
    *["linear", "layer_norm", "normalize", "dropout (evaluation)", "embedding", "one_hot", "pad with zeros"],
    *["cosine_similarity", "pairwise_distance"],
    # modules, state dicts, autograd, optimizers
    *["Linear layer from a state dict", "number of parameters", "gradient of a sum of squares"],
    "one SGD step on a Linear (its new weight)",
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
    assert len(ROWS) >= 120
    assert len(set(names)) == len(names), "row names must be unique"
    assert not set(REQUIRED) - set(names)
    for row in ROWS:
        for fw in FRAMEWORKS:
            entry = row.code(fw)
            assert entry.code.strip(), f"{row.name}: no {fw} code (a missing op needs its workaround)"
            explained = entry.note or entry.missing
            assert not (entry.shape is not None and not explained), f"{row.name}/{fw}: explain the shape"
            assert not entry.ret or fw == "dfdx", f"{row.name}/{fw}: `ret` is for DFDX only"


def test_rows_are_data_read_strictly(tmp_path):
    setup, inputs, _about, rows = cheatsheet.load()
    assert (setup, inputs, rows) == (cheatsheet.SETUP, cheatsheet.INPUTS, ROWS)
    good = cheatsheet.DATA.read_text()
    for broken, says in [
        (good.replace("        torch: torch.zeros(2, 3)\n", "        torh: torch.zeros(2, 3)\n", 1), "keys"),
        (good.replace("          missing: no `full`\n", "          mising: no `full`\n", 1), "unknown keys"),
        (good.replace("  - group: Creation\n", "  - group: Creation\n    title: x\n", 1), "groups"),
        (good.replace("[2, 0], about:", "[2.0, 0], about:", 1), "idx"),
    ]:
        assert broken != good
        path = tmp_path / "cheatsheet.yaml"
        path.write_text(broken)
        with pytest.raises(cheatsheet.DataError, match=re.escape(says)):
            cheatsheet.load(path)


def test_block_scalars_become_the_one_line_that_is_shown_and_run():
    code = "{\n    let m = a\n        .max_dim(1);\n    f(\n        m, b\n    )?\n}\n"
    assert cheatsheet.one_line(code) == "{ let m = a.max_dim(1); f(m, b)? }"


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


# One test per framework, which xdist spreads over its workers (conftest.py: INDEPENDENT).
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
