"""The PyTorch → Rust cheat-sheet: its rows, the programs that check them, and its page.

Every row holds a PyTorch expression and, per framework (tch, Candle, Burn, DFDX), the Rust
expression shown in the table — or, where the framework has no such operation, a note saying
so and the workaround that is shown *and* run instead. `check(fw)` builds one Rust program
per framework that makes the same input tensors, evaluates every row and prints each result
as one line (name, shape, flattened values); it runs in the rust-pytorch kernel and every
result is compared with PyTorch's on the same inputs (same shape, `allclose` within
`TOLERANCE`). `render_markdown()` builds the table from the same rows, so the page
(`course/02_tensors/cheatsheet.md`, checked by tests/test_cheatsheet.py) cannot drift from
the code that is checked.

    python -m coursekit.content.cheatsheet --write        # regenerate the markdown page
    python -m coursekit.content.cheatsheet --check burn   # run one framework's checks
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from dataclasses import dataclass

from .. import pins
from ..pins import ROOT

PAGE = ROOT / "course" / "02_tensors" / "cheatsheet.md"
FRAMEWORKS = ("tch", "candle", "burn", "dfdx")
TITLES = {"tch": "tch", "candle": "Candle", "burn": "Burn (NdArray)", "dfdx": "DFDX"}
# Every result must match PyTorch's: numpy.allclose(rust, torch, **TOLERANCE), same shape.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
LINE = "@@cheatsheet "  # prefix of the lines the Rust programs print

# The inputs every row may use: name -> (nested values, element type). Deterministic values:
# `p` is positive (for log, sqrt, pow), `c` a column, `m` a 0/1 mask, `idx`/`gi` indices.
INPUTS: dict[str, tuple[list, str]] = {
    "a": ([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], "float"),
    "b": ([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "float"),
    "p": ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "float"),
    "v": ([0.5, 1.0, 2.0], "float"),
    "c": ([[10.0], [20.0]], "float"),
    "m": ([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]], "float"),
    "x": ([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]], "float"),
    "y": ([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [[2.0, 0.0], [0.0, 2.0], [1.0, -1.0]]], "float"),
    "idx": ([2, 0], "int"),
    "gi": ([[2, 0], [1, 1]], "int"),
}


@dataclass(frozen=True)
class Code:
    """One framework's entry in a row: the Rust expression shown in the table and run.

    missing: set when the framework has no such operation; says so, and `code` is the
    workaround. note: a difference worth knowing. shape: the result's shape when it
    differs from PyTorch's on purpose (it is checked, and the note says why). ret: for DFDX,
    the result's type when it is not `Tensor<_, f32, Cpu>` (the evaluation's annotation).
    """

    code: str
    missing: str = ""
    note: str = ""
    shape: tuple[int, ...] | None = None
    ret: str = ""


def W(code: str, missing: str, **kw) -> Code:  # noqa: N802 - reads as a table marker
    """A workaround: the framework lacks the operation (`missing` says what)."""
    return Code(code, missing=missing, **kw)


def N(code: str, note: str, **kw) -> Code:  # noqa: N802
    """An equivalent with a note."""
    return Code(code, note=note, **kw)


@dataclass(frozen=True)
class Row:
    name: str
    group: str
    torch: str
    tch: Code
    candle: Code
    burn: Code
    dfdx: Code

    def code(self, fw: str) -> Code:
        return getattr(self, fw)


def _row(name, group, torch, tch, candle, burn, dfdx) -> Row:
    def as_code(c):
        return c if isinstance(c, Code) else Code(c)

    return Row(name, group, torch, as_code(tch), as_code(candle), as_code(burn), as_code(dfdx))


SCALAR_1 = (
    "Burn has no rank-0 tensors: a full reduction returns shape [1] (`.into_scalar()` gives the number)"
)
KEEPS_DIM = "Burn's reductions keep the reduced dim; squeeze it"
DFDX_TUPLE_CONCAT = "concatenating const dims needs nightly Rust; make the dim a runtime `usize` first"

ROWS: list[Row] = [
    # -- creation ---------------------------------------------------------------------------
    _row(
        "zeros",
        "Creation",
        "torch.zeros(2, 3)",
        "Tensor::zeros([2, 3], FLOAT_CPU)",
        "Tensor::zeros((2, 3), DType::F32, &dev)?",
        "Tensor::<B, 2>::zeros([2, 3], &dev)",
        "dev.zeros::<Rank2<2, 3>>()",
    ),
    _row(
        "ones",
        "Creation",
        "torch.ones(2, 3)",
        "Tensor::ones([2, 3], FLOAT_CPU)",
        "Tensor::ones((2, 3), DType::F32, &dev)?",
        "Tensor::<B, 2>::ones([2, 3], &dev)",
        "dev.ones::<Rank2<2, 3>>()",
    ),
    _row(
        "full",
        "Creation",
        "torch.full((2, 3), 7.0)",
        "Tensor::full([2, 3], 7.0, FLOAT_CPU)",
        "Tensor::full(7f32, (2, 3), &dev)?",
        "Tensor::<B, 2>::full([2, 3], 7.0, &dev)",
        W("dev.ones::<Rank2<2, 3>>() * 7.0", "no `full`"),
    ),
    _row(
        "arange",
        "Creation",
        "torch.arange(5.0)",
        "Tensor::arange(5, FLOAT_CPU)",
        "Tensor::arange(0f32, 5., &dev)?",
        N("Tensor::<B, 1, Int>::arange(0..5, &dev).float()", "`arange` makes an `Int` tensor"),
        N("dev.arange(Const::<5>)", "`use dfdx::data::Arange`"),
    ),
    _row(
        "linspace",
        "Creation",
        "torch.linspace(0, 1, 5)",
        "Tensor::linspace(0.0, 1.0, 5, FLOAT_CPU)",
        W("(Tensor::arange(0f32, 5., &dev)? / 4.0)?", "no `linspace`"),
        W("Tensor::<B, 1, Int>::arange(0..5, &dev).float() / 4.0", "no `linspace`"),
        W("dev.arange(Const::<5>) / 4.0", "no `linspace`"),
    ),
    _row(
        "eye",
        "Creation",
        "torch.eye(3)",
        "Tensor::eye(3, FLOAT_CPU)",
        "Tensor::eye(3, DType::F32, &dev)?",
        "Tensor::<B, 2>::eye(3, &dev)",
        W("dev.upper_tri::<Rank2<3, 3>>(1.0, 0).lower_tri(0)", "no `eye`"),
    ),
    _row(
        "tensor from data",
        "Creation",
        "torch.tensor([[1.0, 2.0], [3.0, 4.0]])",
        "Tensor::from_slice2(&[[1f32, 2.], [3., 4.]])",
        "Tensor::new(&[[1f32, 2.], [3., 4.]], &dev)?",
        "Tensor::<B, 2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &dev)",
        "dev.tensor([[1.0, 2.0], [3.0, 4.0]])",
    ),
    _row(
        "from a flat vector",
        "Creation",
        "torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).reshape(2, 3)",
        "Tensor::from_slice(&[1f32, 2., 3., 4., 5., 6.]).view([2, 3])",
        "Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], (2, 3), &dev)?",
        "Tensor::<B, 2>::from_data(TensorData::new(vec![1f32, 2., 3., 4., 5., 6.], [2, 3]), &dev)",
        "dev.tensor_from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], (Const::<2>, Const::<3>))",
    ),
    _row(
        "zeros_like",
        "Creation",
        "torch.zeros_like(a)",
        "a.zeros_like()",
        "a.zeros_like()?",
        "a.zeros_like()",
        "dev.zeros_like(&a)",
    ),
    # -- shapes -----------------------------------------------------------------------------
    _row(
        "reshape",
        "Shapes and indexing",
        "a.reshape(3, 2)",
        "a.reshape([3, 2])",
        "a.reshape((3, 2))?",
        "a.reshape([3, 2])",
        "a.reshape::<Rank2<3, 2>>()",
    ),
    _row(
        "reshape with -1",
        "Shapes and indexing",
        "a.reshape(-1, 2)",
        "a.reshape([-1, 2])",
        N("a.reshape(((), 2))?", "`()` marks the inferred dim"),
        "a.reshape([-1, 2])",
        W("a.reshape::<Rank2<3, 2>>()", "no inferred dim: the shape is a type"),
    ),
    _row(
        "transpose (2-D)",
        "Shapes and indexing",
        "a.t()",
        N("a.tr()", "`t()` is named `tr()`"),
        "a.t()?",
        "a.transpose()",
        W("a.permute::<Rank2<3, 2>, _>()", "no `t()`: permute to the target shape"),
    ),
    _row(
        "transpose two dims",
        "Shapes and indexing",
        "x.transpose(1, 2)",
        "x.transpose(1, 2)",
        "x.transpose(1, 2)?",
        "x.swap_dims(1, 2)",
        W("x.permute::<_, Axes3<0, 2, 1>>()", "no `transpose`: permute by axes"),
    ),
    _row(
        "permute",
        "Shapes and indexing",
        "x.permute(2, 0, 1)",
        "x.permute([2, 0, 1])",
        "x.permute((2, 0, 1))?",
        "x.permute([2, 0, 1])",
        "x.permute::<_, Axes3<2, 0, 1>>()",
    ),
    _row(
        "unsqueeze",
        "Shapes and indexing",
        "a.unsqueeze(0)",
        "a.unsqueeze(0)",
        "a.unsqueeze(0)?",
        N("a.unsqueeze_dim::<3>(0)", "the result's rank is a type parameter"),
        W("a.reshape::<Rank3<1, 2, 3>>()", "no `unsqueeze`"),
    ),
    _row(
        "squeeze a dim",
        "Shapes and indexing",
        "c.squeeze(1)",
        "c.squeeze_dim(1)",
        "c.squeeze(1)?",
        "c.squeeze_dim::<1>(1)",
        W("c.reshape::<Rank1<2>>()", "no `squeeze`"),
    ),
    _row(
        "flatten",
        "Shapes and indexing",
        "a.flatten()",
        "a.flatten(0, -1)",
        "a.flatten_all()?",
        "a.flatten::<1>(0, 1)",
        W("a.reshape::<Rank1<6>>()", "no `flatten` op"),
    ),
    _row(
        "index a row",
        "Shapes and indexing",
        "a[1]",
        N("a.i(1)", "`use tch::IndexOp`"),
        N("a.i(1)?", "`use candle_core::IndexOp`"),
        N("a.slice(s![1, ..]).squeeze_dim::<1>(0)", "`slice` keeps the rank"),
        N("a.select(dev.tensor(1))", "the index is a `usize` tensor"),
    ),
    _row(
        "slice",
        "Shapes and indexing",
        "a[:, 1:]",
        "a.i((.., 1..))",
        "a.i((.., 1..))?",
        "a.slice(s![.., 1..])",
        N("a.slice((.., 1..))", "sliced dims become runtime `usize` dims"),
    ),
    _row(
        "narrow",
        "Shapes and indexing",
        "a.narrow(1, 1, 2)",
        "a.narrow(1, 1, 2)",
        "a.narrow(1, 1, 2)?",
        "a.narrow(1, 1, 2)",
        W("a.slice((.., 1..3))", "no `narrow`"),
    ),
    _row(
        "index_select",
        "Shapes and indexing",
        "a.index_select(1, idx)",
        "a.index_select(1, &idx)",
        "a.index_select(&idx, 1)?",
        "a.select(1, idx)",
        W(
            "a.gather::<Rank2<2, 2>, _>(idx.broadcast::<Rank2<2, 2>, Axis<0>>())",
            "no `index_select`: `gather` with the indices repeated per row",
        ),
    ),
    _row(
        "gather",
        "Shapes and indexing",
        "a.gather(1, gi)",
        "a.gather(1, &gi, false)",
        "a.gather(&gi, 1)?",
        "a.gather(1, gi)",
        N("a.gather::<Rank2<2, 2>, _>(gi)", "the index's shape picks the axis"),
    ),
    _row(
        "cat",
        "Shapes and indexing",
        "torch.cat([a, p], dim=0)",
        "Tensor::cat(&[&a, &p], 0)",
        "Tensor::cat(&[&a, &p], 0)?",
        "Tensor::cat(vec![a, p], 0)",
        W(
            "(a.realize::<(usize, Const<3>)>(), p.realize::<(usize, Const<3>)>()).concat_along(Axis::<0>)",
            DFDX_TUPLE_CONCAT,
        ),
    ),
    _row(
        "stack",
        "Shapes and indexing",
        "torch.stack([a, p])",
        "Tensor::stack(&[&a, &p], 0)",
        "Tensor::stack(&[&a, &p], 0)?",
        "Tensor::stack::<3>(vec![a, p], 0)",
        "[a, p].stack()",
    ),
    _row(
        "chunk",
        "Shapes and indexing",
        "a.chunk(3, dim=1)[1]",
        "a.chunk(3, 1)[1]",
        "a.chunk(3, 1)?[1]",
        "a.chunk(3, 1)[1]",
        W("a.slice((.., 1..2))", "no `chunk`"),
    ),
    _row(
        "split",
        "Shapes and indexing",
        "a.split([1, 2], dim=1)[1]",
        "a.split_with_sizes([1, 2], 1)[1]",
        W("a.narrow(1, 1, 2)?", "no `split`"),
        "a.split_with_sizes(vec![1, 2], 1)[1]",
        W("a.slice((.., 1..))", "no `split`"),
    ),
    _row(
        "expand",
        "Shapes and indexing",
        "v.expand(2, 3)",
        "v.expand([2, 3], false)",
        "v.expand((2, 3))?",
        "v.expand([2, 3])",
        "v.broadcast::<Rank2<2, 3>, _>()",
    ),
    _row(
        "repeat",
        "Shapes and indexing",
        "a.repeat(2, 1)",
        "a.repeat([2, 1])",
        "a.repeat((2, 1))?",
        "a.repeat(&[2, 1])",
        W("a.broadcast::<Rank3<2, 2, 3>, Axis<0>>().reshape::<Rank2<4, 3>>()", "no `repeat`"),
    ),
    _row(
        "flip",
        "Shapes and indexing",
        "a.flip(1)",
        "a.flip([1])",
        "a.flip(&[1])?",
        "a.flip([1])",
        W("a.gather::<Rank2<2, 3>, _>(dev.tensor([2, 1, 0]).broadcast::<Rank2<2, 3>, _>())", "no `flip`"),
    ),
    # -- element-wise -----------------------------------------------------------------------
    _row(
        "add",
        "Element-wise",
        "a + p",
        "&a + &p",
        "(&a + &p)?",
        "a + p",
        "a + p",
    ),
    _row(
        "sub",
        "Element-wise",
        "a - p",
        "&a - &p",
        "(&a - &p)?",
        "a - p",
        "a - p",
    ),
    _row(
        "mul",
        "Element-wise",
        "a * p",
        "&a * &p",
        "(&a * &p)?",
        "a * p",
        "a * p",
    ),
    _row(
        "div",
        "Element-wise",
        "a / p",
        "&a / &p",
        "(&a / &p)?",
        "a / p",
        "a / p",
    ),
    _row(
        "scalar ops",
        "Element-wise",
        "a * 2 + 1",
        "&a * 2.0 + 1.0",
        N("a.affine(2.0, 1.0)?", "or `((&a * 2.0)? + 1.0)?`"),
        "a * 2.0 + 1.0",
        "a * 2.0 + 1.0",
    ),
    _row("neg", "Element-wise", "-a", "-&a", "a.neg()?", "-a", "-a"),
    _row("abs", "Element-wise", "a.abs()", "a.abs()", "a.abs()?", "a.abs()", "a.abs()"),
    _row("exp", "Element-wise", "a.exp()", "a.exp()", "a.exp()?", "a.exp()", "a.exp()"),
    _row("log", "Element-wise", "p.log()", "p.log()", "p.log()?", "p.log()", "p.ln()"),
    _row("sqrt", "Element-wise", "p.sqrt()", "p.sqrt()", "p.sqrt()?", "p.sqrt()", "p.sqrt()"),
    _row(
        "pow (float exponent)",
        "Element-wise",
        "p.pow(1.5)",
        "p.pow_tensor_scalar(1.5)",
        "p.powf(1.5)?",
        "p.powf_scalar(1.5)",
        "p.powf(1.5)",
    ),
    _row("square", "Element-wise", "a.square()", "a.square()", "a.sqr()?", "a.square()", "a.square()"),
    _row(
        "clamp",
        "Element-wise",
        "a.clamp(-1.0, 2.0)",
        "a.clamp(-1.0, 2.0)",
        "a.clamp(-1.0, 2.0)?",
        "a.clamp(-1.0, 2.0)",
        "a.clamp(-1.0, 2.0)",
    ),
    _row(
        "maximum",
        "Element-wise",
        "torch.maximum(a, p)",
        "a.maximum(&p)",
        "a.maximum(&p)?",
        "a.max_pair(p)",
        "a.maximum(p)",
    ),
    _row(
        "broadcast a row vector",
        "Element-wise",
        "a + v",
        "&a + &v",
        N("a.broadcast_add(&v)?", "`+` needs equal shapes; `broadcast_*` broadcasts"),
        N("a + v.unsqueeze()", "operands need the same rank"),
        "a + v.broadcast()",
    ),
    _row(
        "broadcast a column",
        "Element-wise",
        "a * c",
        "&a * &c",
        "a.broadcast_mul(&c)?",
        "a * c",
        W("a * c.reshape::<Rank1<2>>().broadcast()", "no broadcasting of size-1 dims: drop the dim first"),
    ),
    _row(
        "comparison → float mask",
        "Element-wise",
        "(a > 0).float()",
        "a.gt(0.0).to_kind(Kind::Float)",
        N("a.gt(0.0)?.to_dtype(DType::F32)?", "masks are `u8` tensors"),
        "a.greater_elem(0.0).float()",
        W("a.gt(0.0).choose(dev.ones_like(&a), dev.zeros_like(&a))", "no bool → float cast"),
    ),
    _row(
        "where",
        "Element-wise",
        "torch.where(a > 0, a, p)",
        "a.where_self(&a.gt(0.0), &p)",
        "a.gt(0.0)?.where_cond(&a, &p)?",
        N(
            "p.mask_where(a.clone().greater_elem(0.0), a)",
            "the receiver gives the values where the mask is false",
        ),
        "a.gt(0.0).choose(a, p)",
    ),
    _row(
        "masked_fill",
        "Element-wise",
        "a.masked_fill(m == 0, -100.0)",
        "a.masked_fill(&m.eq(0.0), -100.0)",
        W("m.eq(0.0)?.where_cond(&Tensor::full(-100f32, (2, 3), &dev)?, &a)?", "no `masked_fill`"),
        "a.mask_fill(m.equal_elem(0.0), -100.0)",
        W("m.eq(0.0).choose(dev.ones_like(&a) * -100.0, a)", "no `masked_fill`"),
    ),
    # -- activations ------------------------------------------------------------------------
    _row(
        "relu",
        "Activations",
        "a.relu()",
        "a.relu()",
        "a.relu()?",
        N("relu(a)", "`burn::tensor::activation::relu`"),
        "a.relu()",
    ),
    _row(
        "sigmoid",
        "Activations",
        "a.sigmoid()",
        "a.sigmoid()",
        "candle_nn::ops::sigmoid(&a)?",
        "sigmoid(a)",
        "a.sigmoid()",
    ),
    _row("tanh", "Activations", "a.tanh()", "a.tanh()", "a.tanh()?", "a.tanh()", "a.tanh()"),
    _row(
        "gelu (exact, erf)",
        "Activations",
        "F.gelu(a)",
        'a.gelu("none")',
        N("a.gelu_erf()?", "`gelu()` is the tanh approximation"),
        "gelu(a)",
        N("a.accurate_gelu()", "`gelu()` is the tanh approximation"),
    ),
    _row(
        "softmax",
        "Activations",
        "a.softmax(dim=1)",
        "a.softmax(1, Kind::Float)",
        "candle_nn::ops::softmax(&a, 1)?",
        "softmax(a, 1)",
        "a.softmax::<Axis<1>>()",
    ),
    _row(
        "log_softmax",
        "Activations",
        "a.log_softmax(dim=1)",
        "a.log_softmax(1, Kind::Float)",
        "candle_nn::ops::log_softmax(&a, 1)?",
        "log_softmax(a, 1)",
        "a.log_softmax::<Axis<1>>()",
    ),
    # -- reductions -------------------------------------------------------------------------
    _row(
        "sum",
        "Reductions",
        "a.sum()",
        "a.sum(Kind::Float)",
        "a.sum_all()?",
        N("a.sum()", SCALAR_1, shape=(1,)),
        "a.sum::<Rank0, _>()",
    ),
    _row(
        "sum over a dim",
        "Reductions",
        "a.sum(dim=0)",
        "a.sum_dim_intlist(0, false, Kind::Float)",
        "a.sum(0)?",
        N("a.sum_dim(0).squeeze_dim::<1>(0)", KEEPS_DIM),
        N("a.sum::<Rank1<3>, _>()", "name the result's shape (or the axes: `sum::<_, Axis<0>>()`)"),
    ),
    _row(
        "mean",
        "Reductions",
        "a.mean()",
        "a.mean(Kind::Float)",
        "a.mean_all()?",
        N("a.mean()", SCALAR_1, shape=(1,)),
        "a.mean::<Rank0, _>()",
    ),
    _row(
        "mean over a dim, keepdim",
        "Reductions",
        "a.mean(dim=1, keepdim=True)",
        "a.mean_dim(1, true, Kind::Float)",
        "a.mean_keepdim(1)?",
        "a.mean_dim(1)",
        W("a.mean::<Rank1<2>, _>().reshape::<Rank2<2, 1>>()", "no keepdim"),
    ),
    _row(
        "variance over a dim (unbiased)",
        "Reductions",
        "a.var(dim=1)",
        "a.var_dim(1, true, false)",
        "a.var(1)?",
        N("a.var(1).squeeze_dim::<1>(1)", KEEPS_DIM),
        W("a.var::<Rank1<2>, _>() * 1.5", "`var` is the biased variance: scale by n/(n-1) = 3/2"),
    ),
    _row(
        "max",
        "Reductions",
        "a.max()",
        "a.max()",
        "a.max_all()?",
        N("a.max()", SCALAR_1, shape=(1,)),
        "a.max::<Rank0, _>()",
    ),
    _row(
        "max over a dim",
        "Reductions",
        "a.amax(dim=1)",
        "a.amax(1, false)",
        "a.max(1)?",
        N("a.max_dim(1).squeeze_dim::<1>(1)", KEEPS_DIM),
        "a.max::<Rank1<2>, _>()",
    ),
    _row(
        "argmax over a dim",
        "Reductions",
        "a.argmax(dim=1)",
        "a.argmax(1, false)",
        N("a.argmax(1)?", "indices are `u32`"),
        N("a.argmax(1).squeeze_dim::<1>(1)", KEEPS_DIM),
        W(
            "dev.tensor(a.array().map(|r| (0..r.len()).max_by(|&i, &j| r[i].total_cmp(&r[j])).unwrap()))",
            "no `argmax`: compute it on the host",
            ret="Tensor<_, usize, Cpu>",
        ),
    ),
    _row(
        "min",
        "Reductions",
        "a.min()",
        "a.min()",
        "a.min_all()?",
        N("a.min()", SCALAR_1, shape=(1,)),
        "a.min::<Rank0, _>()",
    ),
    _row(
        "cumsum",
        "Reductions",
        "a.cumsum(dim=1)",
        "a.cumsum(1, Kind::Float)",
        "a.cumsum(1)?",
        "a.cumsum(1)",
        W(
            "a.matmul(dev.upper_tri::<Rank2<3, 3>>(1.0, 0))",
            "no `cumsum`: multiply by an upper-triangular ones matrix",
        ),
    ),
    _row(
        "sort",
        "Reductions",
        "a.sort(dim=1).values",
        "a.sort(1, false).0",
        N("a.sort_last_dim(true)?.0", "sorts the last dim only"),
        "a.sort(1)",
        W(
            "dev.tensor(a.array().map(|mut r| { r.sort_by(f32::total_cmp); r }))",
            "no `sort`: sort on the host",
        ),
    ),
    # -- linear algebra ---------------------------------------------------------------------
    _row(
        "matmul",
        "Linear algebra",
        "a @ b",
        "a.matmul(&b)",
        "a.matmul(&b)?",
        "a.matmul(b)",
        "a.matmul(b)",
    ),
    _row(
        "batched matmul",
        "Linear algebra",
        "x @ y",
        "x.matmul(&y)",
        "x.matmul(&y)?",
        "x.matmul(y)",
        "x.matmul(y)",
    ),
    _row(
        "matrix × vector",
        "Linear algebra",
        "a @ v",
        "a.mv(&v)",
        "a.mv(&v)?",
        N("matvec(a, v)", "`burn::tensor::linalg::matvec`; `matmul` needs equal ranks"),
        "a.matmul(v)",
    ),
    _row(
        "dot",
        "Linear algebra",
        "torch.dot(v, v)",
        "v.dot(&v)",
        "v.dot(&v)?",
        N("v.clone().dot(v)", SCALAR_1, shape=(1,)),
        W("(v.clone() * v).sum::<Rank0, _>()", "no `dot` (`matmul` of two vectors is the outer product)"),
    ),
    # -- dtypes -----------------------------------------------------------------------------
    _row(
        "float → int (truncates)",
        "Dtypes",
        "(a / 2).long()",
        "(&a / 2.0).to_kind(Kind::Int64)",
        "(&a / 2.0)?.to_dtype(DType::I64)?",
        "(a / 2.0).int()",
        Code("(a / 2.0).to_dtype::<i64>()", ret="Tensor<_, i64, Cpu>"),
    ),
    _row(
        "int → float",
        "Dtypes",
        "idx.float()",
        "idx.to_kind(Kind::Float)",
        "idx.to_dtype(DType::F32)?",
        "idx.float()",
        "idx.to_dtype::<f32>()",
    ),
]

GROUPS = list(dict.fromkeys(r.group for r in ROWS))

# -- the Rust programs ----------------------------------------------------------------------------

# What each framework's table entries assume: imports, the device, and the inputs.
SETUP = {
    "tch": ["use tch::{kind::FLOAT_CPU, IndexOp, Kind, Tensor};"],
    "candle": ["use candle_core::{DType, Device, IndexOp, Tensor};", "let dev = Device::Cpu;"],
    "burn": [
        "use burn::prelude::*;",
        "use burn::tensor::activation::{gelu, log_softmax, relu, sigmoid, softmax};",
        "use burn::tensor::linalg::matvec;",
        "type B = burn::backend::NdArray;",
        "let dev: Device<B> = Default::default();",
    ],
    "dfdx": ["use dfdx::prelude::*;", "use dfdx::data::Arange;", "let dev: Cpu = Default::default();"],
}

# Each framework turns a result into (shape, flat f32 values); `cs_row` prints it as one line.
_COMMON = r"""
type CsOut = (Vec<usize>, Vec<f32>);
fn cs_fmt(x: f32) -> String {
    if x.is_nan() { "NaN".to_string() }
    else if x.is_infinite() { if x > 0.0 { "Infinity".to_string() } else { "-Infinity".to_string() } }
    else { format!("{:?}", x) }
}
fn cs_row<E: std::fmt::Display>(name: &str, f: impl FnOnce() -> Result<CsOut, E>) {
    let mut out: Option<Result<CsOut, String>> = None;
    let panicked = catch_panic(std::panic::AssertUnwindSafe(|| {
        out = Some(f().map_err(|e| e.to_string()));
    }));
    let result = match (panicked, out) {
        (Some(msg), _) => Err(format!("panic: {msg}")),
        (None, Some(r)) => r,
        (None, None) => Err("no result".to_string()),
    };
    match result {
        Ok((shape, values)) => {
            let values: Vec<String> = values.into_iter().map(cs_fmt).collect();
            let values = values.join(", ");
            println!("@@cheatsheet {{\"name\": {name:?}, \"shape\": {shape:?}, \"values\": [{values}]}}");
        }
        Err(e) => println!("@@cheatsheet-error {:?} {}", name, e.replace('\n', " | ")),
    }
}
"""

_HELPERS = {
    "tch": r"""
trait CsData { fn cs_data(&self) -> Result<CsOut, String>; }
impl CsData for Tensor {
    fn cs_data(&self) -> Result<CsOut, String> {
        let shape = self.size().iter().map(|&d| d as usize).collect();
        let flat = self.f_to_kind(Kind::Float).and_then(|t| t.f_reshape([-1])).map_err(|e| e.to_string())?;
        Ok((shape, Vec::<f32>::try_from(&flat).map_err(|e| e.to_string())?))
    }
}
""",
    "candle": r"""
trait CsData { fn cs_data(&self) -> candle_core::Result<CsOut>; }
impl CsData for Tensor {
    fn cs_data(&self) -> candle_core::Result<CsOut> {
        Ok((self.dims().to_vec(), self.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?))
    }
}
""",
    "burn": r"""
trait CsData { fn cs_data(&self) -> Result<CsOut, String>; }
impl<const D: usize> CsData for Tensor<B, D> {
    fn cs_data(&self) -> Result<CsOut, String> {
        Ok((self.dims().to_vec(), self.clone().into_data().iter::<f32>().collect()))
    }
}
impl<const D: usize> CsData for Tensor<B, D, Int> {
    fn cs_data(&self) -> Result<CsOut, String> { self.clone().float().cs_data() }
}
impl<const D: usize> CsData for Tensor<B, D, Bool> {
    fn cs_data(&self) -> Result<CsOut, String> { self.clone().float().cs_data() }
}
""",
    "dfdx": r"""
trait CsData { fn cs_data(&self) -> Result<CsOut, String>; }
"""
    + "".join(
        f"""
impl<S: Shape, T> CsData for Tensor<S, {e}, Cpu, T> {{
    fn cs_data(&self) -> Result<CsOut, String> {{
        Ok((self.shape().concrete().into(), self.as_vec().into_iter().map(|x| x as f32).collect()))
    }}
}}"""
        for e in ("f32", "i64", "usize")
    )
    + r"""
impl<S: Shape, T> CsData for Tensor<S, bool, Cpu, T> {
    fn cs_data(&self) -> Result<CsOut, String> {
        let values = self.as_vec().into_iter().map(|x| if x { 1.0 } else { 0.0 }).collect();
        Ok((self.shape().concrete().into(), values))
    }
}
""",
}

# How a row's expression is evaluated: `{clones}` re-binds the inputs it uses (Burn and DFDX
# operations take their inputs by value), `{code}` is the table's code, untouched.
_ROW_TEMPLATE = {
    "tch": "cs_row({name}, || -> Result<CsOut, String> {{ ({code}).cs_data() }});",
    "candle": "cs_row({name}, || -> candle_core::Result<CsOut> {{ ({code}).cs_data() }});",
    "burn": "cs_row({name}, || -> Result<CsOut, String> {{ {clones}({code}).cs_data() }});",
    "dfdx": "cs_row({name}, || -> Result<CsOut, String> {{ "
    "{clones}let r: {ret} = {{ {code} }}; r.cs_data() }});",
}
_DFDX_RET = "Tensor<_, f32, Cpu>"


def _rust_number(x, kind: str) -> str:
    return repr(float(x)) if kind == "float" else str(int(x))


def _nested(values, kind: str, first_suffix: str = "") -> str:
    """A Rust array literal; the first scalar may carry a type suffix."""
    done = [False]

    def go(v):
        if isinstance(v, list):
            return "[" + ", ".join(go(e) for e in v) + "]"
        s = _rust_number(v, kind)
        if not done[0]:
            done[0] = True
            s += first_suffix
        return s

    return go(values)


def _flat(values) -> list:
    return [e for v in values for e in _flat(v)] if isinstance(values, list) else [values]


def _shape(values) -> list[int]:
    return [len(values), *_shape(values[0])] if isinstance(values, list) else []


def input_lines(fw: str) -> list[str]:
    """Rust statements that build the inputs, as each framework writes them."""
    lines = []
    for name, (values, kind) in INPUTS.items():
        shape, rank = _shape(values), len(_shape(values))
        if fw == "tch":
            suffix = "f32" if kind == "float" else "i64"
            flat = _nested(_flat(values), kind, suffix)
            view = "" if rank == 1 else f".view({shape})"
            lines.append(f"let {name} = Tensor::from_slice(&{flat}){view};")
        elif fw == "candle":
            suffix = "f32" if kind == "float" else "u32"
            lines.append(f"let {name} = Tensor::new(&{_nested(values, kind, suffix)}, &dev)?;")
        elif fw == "burn":
            if kind == "float":
                lines.append(f"let {name} = Tensor::<B, {rank}>::from_floats({_nested(values, kind)}, &dev);")
            else:
                lines.append(
                    f"let {name} = Tensor::<B, {rank}, Int>::from_ints({_nested(values, kind)}, &dev);"
                )
        else:
            elem = "f32" if kind == "float" else "usize"
            dims = ", ".join(map(str, shape))
            lines.append(
                f"let {name}: Tensor<Rank{rank}<{dims}>, {elem}, Cpu> = dev.tensor({_nested(values, kind)});"
            )
    return lines


def _uses(code: str) -> list[str]:
    return [name for name in INPUTS if re.search(rf"(?<![\w.:]){name}\b", code)]


def row_statement(fw: str, row: Row) -> str:
    entry = row.code(fw)
    clones = "".join(f"let {n} = {n}.clone(); " for n in _uses(entry.code)) if fw in ("burn", "dfdx") else ""
    name = json.dumps(row.name, ensure_ascii=False)
    return _ROW_TEMPLATE[fw].format(name=name, code=entry.code, clones=clones, ret=entry.ret or _DFDX_RET)


def _main(fw: str, rows: list[Row], fn_name: str = "cs_main") -> str:
    setup = [line for line in SETUP[fw] if not line.startswith(("use ", "type "))]
    body = [*setup, *input_lines(fw), *(row_statement(fw, r) for r in rows)]
    if fw == "candle":
        head, tail, call = (
            f"fn {fn_name}() -> candle_core::Result<()> {{",
            "    Ok(())\n}",
            f"{fn_name}().unwrap();",
        )
    else:
        head, tail, call = f"fn {fn_name}() {{", "}", f"{fn_name}();"
    return "\n".join(["#[allow(unused)]", head, *("    " + line for line in body), tail, call])


def program(fw: str, rows: list[Row] | None = None) -> list[str]:
    """The cells that check `rows` (all rows by default) in framework `fw`: the pinned `:dep`
    lines, the helpers (imports, result printing), and one cell that evaluates every row."""
    items = [line for line in SETUP[fw] if line.startswith(("use ", "type "))]
    helpers = "\n".join(items) + "\n" + _COMMON + _HELPERS[fw]
    return ["\n".join(pins.dep_lines(fw)), helpers, _main(fw, ROWS if rows is None else rows)]


# -- running and comparing ------------------------------------------------------------------------


def torch_inputs() -> dict:
    import torch

    return {
        name: torch.tensor(values, dtype=torch.float32 if kind == "float" else torch.int64)
        for name, (values, kind) in INPUTS.items()
    }


def torch_result(row: Row) -> tuple[list[int], list[float]]:
    """Evaluate the row's PyTorch expression on the inputs: (shape, flat float values)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    value = eval(row.torch, {"torch": torch, "F": F, **torch_inputs()})  # noqa: S307 - our own rows
    value = torch.as_tensor(value).detach()
    return list(value.shape), value.to(torch.float64).flatten().tolist()


class _Kernel:
    """A rust-pytorch kernel; `run` executes one cell and returns (stdout, error or None)."""

    def __init__(self):
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="rust-pytorch", startup_timeout=300, cwd=str(ROOT))

    def run(self, code: str, timeout: float = 1200) -> tuple[str, str | None]:
        chunks: list[str] = []

        def hook(msg):
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                chunks.append(msg["content"]["text"])

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)["content"]
        error = None
        if reply["status"] != "ok":
            error = f"{reply.get('ename')}: {reply.get('evalue')}"
        return "".join(chunks), error

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def parse(stdout: str) -> dict[str, dict]:
    """The results a program printed, by row name: {"shape", "values"} or {"error"}."""
    results = {}
    for line in stdout.splitlines():
        if line.startswith(LINE):
            item = json.loads(line[len(LINE) :])
            results[item["name"]] = item
        elif line.startswith("@@cheatsheet-error "):
            rest = line[len("@@cheatsheet-error ") :]
            name, _, message = rest.partition('" ')
            results[json.loads(name + '"')] = {"error": message}
    return results


def compare(row: Row, fw: str, result: dict | None) -> str | None:
    """None when the framework's result matches PyTorch's, else what is wrong."""
    import numpy as np

    if result is None:
        return "no result printed"
    if "error" in result:
        return result["error"].split(" | ")[0][:500]
    shape, values = torch_result(row)
    expected_shape = list(row.code(fw).shape) if row.code(fw).shape is not None else shape
    if result["shape"] != expected_shape:
        return f"shape {result['shape']} != expected {expected_shape}"
    got = np.array(result["values"], dtype=np.float64)
    want = np.array(values, dtype=np.float64)
    if got.shape != want.shape or not np.allclose(got, want, **TOLERANCE):
        return f"values {result['values']} != PyTorch {values}"
    return None


def check(fw: str, kernel: _Kernel | None = None, rows: list[Row] | None = None) -> dict[str, str]:
    """Run every row in `fw` and compare with PyTorch: {row name: problem} for the rows that
    fail (empty when all pass). When the program does not compile, each row is compiled on
    its own so that the failures name their rows."""
    rows = ROWS if rows is None else rows
    own = kernel is None
    kernel = kernel or _Kernel()
    try:
        deps, helpers, main = program(fw, rows)
        for cell in (deps, helpers):
            _, error = kernel.run(cell)
            if error:
                return {"(set-up)": error}
        stdout, error = kernel.run(main)
        results = parse(stdout)
        if error and not results:  # a compile error: find the rows that cause it
            for i, row in enumerate(rows):
                out, row_error = kernel.run(_main(fw, [row], f"cs_row_{i}"))
                results.update(parse(out))
                if row_error and row.name not in results:
                    results[row.name] = {"error": row_error}
        problems = {row.name: compare(row, fw, results.get(row.name)) for row in rows}
        if error and not any(problems.values()):
            problems["(program)"] = error
        return {name: p for name, p in problems.items() if p}
    finally:
        if own:
            kernel.close()


# -- the page ------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code_span(code: str) -> str:
    if "|" not in code:
        return f"`{code}`"
    # A pipe would end the table cell; `\|` inside backticks is not unescaped by every renderer
    # (mistune keeps the backslash), while an HTML entity in <code> reads the same everywhere.
    return "<code>" + html.escape(code, quote=False).replace("|", "&#124;") + "</code>"


def render_entry(entry: Code) -> str:
    shown = _code_span(entry.code)
    if entry.missing:
        return f"— *{_cell(entry.missing)}*; workaround: {shown}"
    if entry.note:
        return f"{shown}<br>*{_cell(entry.note)}*"
    return shown


def _versions() -> dict[str, str]:
    out = {}
    for fw in FRAMEWORKS:
        dep = pins.frameworks()[fw]["deps"][0]
        out[fw] = re.search(r'"=([\d.]+)"', dep).group(1)
    return out


def render_markdown() -> str:
    """The cheat-sheet page, built from ROWS (course/02_tensors/cheatsheet.md holds its output)."""
    versions = _versions()
    torch_version = pins.python_requirements()["torch"]
    counts = workaround_counts()
    lines = [
        "# PyTorch → Rust cheat-sheet",
        "",
        "<!-- Generated from coursekit/cheatsheet.py by `python -m coursekit cheatsheet --write`; "
        "do not edit. -->",
        "",
        f"{len(ROWS)} PyTorch operations and their equivalents in tch {versions['tch']}, "
        f"Candle {versions['candle']}, Burn {versions['burn']} (NdArray backend) and "
        f"DFDX {versions['dfdx']}. "
        "Where a framework has no such operation, the entry says so (—) and gives the workaround.",
        "",
        "**How it is checked.** Every entry in this table — each workaround included — is the exact "
        "code that `tests/test_cheatsheet.py` runs: one Rust program per framework, in the course "
        "kernel, builds the inputs below, evaluates every row and prints the result; each result must "
        f"have PyTorch's shape and match PyTorch {torch_version}'s values on the same inputs within "
        f"`numpy.allclose(rtol={TOLERANCE['rtol']:g}, atol={TOLERANCE['atol']:g})`. An entry whose shape "
        "differs on purpose says so, and that shape is checked instead. The same test checks that this "
        "page is exactly what `coursekit.content.cheatsheet.render_markdown()` produces from those rows.",
        "",
        "Workarounds needed: "
        + ", ".join(f"{TITLES[fw]} {counts[fw]}" for fw in FRAMEWORKS)
        + f" (of {len(ROWS)} rows).",
        "",
        "## Inputs",
        "",
        "```python",
        "import torch",
        "import torch.nn.functional as F",
    ]
    for name, (values, kind) in INPUTS.items():
        dtype = "" if kind == "float" else ", dtype=torch.int64"
        lines.append(f"{name} = torch.tensor({values}{dtype})")
    lines += ["```", ""]
    lines.append(
        "Each framework's table entries assume these imports and inputs. Burn and DFDX operations take "
        "their inputs by value, so the check runs every row on fresh clones (write `a.clone()` where "
        "you still need `a`). Candle's `?` needs a function returning `candle_core::Result`. DFDX "
        "entries are evaluated as `let r: Tensor<_, f32, Cpu> = ...;` (creation functions take the "
        "element type from the context) unless the result has another element type."
    )
    for fw in FRAMEWORKS:
        lines += ["", f"<details><summary>{TITLES[fw]} {versions[fw]}</summary>", "", "```rust"]
        lines += [*pins.dep_lines(fw), *SETUP[fw], *input_lines(fw)]
        lines += ["```", "", "</details>"]
    head = (
        f"| PyTorch | tch {versions['tch']} | Candle {versions['candle']} | "
        f"Burn {versions['burn']} | DFDX {versions['dfdx']} |"
    )
    for group in GROUPS:
        lines += ["", f"## {group}", "", head, "|---|---|---|---|---|"]
        for row in ROWS:
            if row.group == group:
                cells = [_code_span(row.torch), *(render_entry(row.code(fw)) for fw in FRAMEWORKS)]
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def workaround_counts() -> dict[str, int]:
    """How many rows need a workaround, per framework."""
    return {fw: sum(bool(r.code(fw).missing) for r in ROWS) for fw in FRAMEWORKS}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--write", action="store_true", help=f"regenerate {PAGE.relative_to(ROOT)}")
    parser.add_argument("--check", action="append", choices=FRAMEWORKS, help="run a framework's checks")
    parser.add_argument("--row", action="append", help="with --check: only this row (repeatable)")
    parser.add_argument("--program", choices=FRAMEWORKS, help="print a framework's check program")


def run(args: argparse.Namespace) -> int:
    status = 0
    if args.write:
        PAGE.parent.mkdir(parents=True, exist_ok=True)
        PAGE.write_text(render_markdown())
        print(f"wrote {PAGE.relative_to(ROOT)} ({len(ROWS)} rows)")
    if args.program:
        print("\n\n// ----- next cell -----\n".join(program(args.program)))
    rows = [r for r in ROWS if r.name in args.row] if args.row else ROWS
    for fw in args.check or []:
        problems = check(fw, rows=rows)
        print(f"{fw}: {len(rows) - len(problems)}/{len(rows)} rows match PyTorch")
        for name, problem in problems.items():
            print(f"  {name}: {problem}")
        status |= bool(problems)
    return status


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m coursekit.content.cheatsheet", description=description)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
