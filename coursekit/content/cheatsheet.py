"""The PyTorch → Rust cheat-sheet: reading its rows, the programs that check them, and its page.

The rows are data, in `cheatsheet.yaml` next to this module (its header says the format; `load`
reads it strictly). Every row holds PyTorch code and, per framework (tch, Candle, Burn, DFDX),
the Rust expression shown in the table — or, where the framework has no such operation, a note
saying so and the workaround that is shown *and* run instead. `check(fw)` builds one Rust program
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
import ast
import html
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from .. import pins
from ..pins import ROOT

PAGE = ROOT / "course" / "02_tensors" / "cheatsheet.md"
DATA = Path(__file__).with_name("cheatsheet.yaml")  # the rows, inputs and set-up (see its header)
FRAMEWORKS = ("tch", "candle", "burn", "dfdx")
TITLES = {"tch": "tch", "candle": "Candle", "burn": "Burn (NdArray)", "dfdx": "DFDX"}
# Every result must match PyTorch's: numpy.allclose(rust, torch, **TOLERANCE), same shape.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
LINE = "@@cheatsheet "  # prefix of the lines the Rust programs print


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


# -- loading the data file ------------------------------------------------------------------------

_ROW_KEYS = {"name", "torch", *FRAMEWORKS}
_ENTRY_KEYS = {"code", "missing", "note", "shape", "ret"}
_KINDS = {"float", "int"}


class DataError(ValueError):
    """cheatsheet.yaml does not have the expected form; the message says where."""


def one_line(text: str) -> str:
    """A block scalar's lines as the one line the table shows and the check runs: each line
    stripped, joined by a space, except before a line that starts with `.`, `)`, `]` or `?`
    and after one that ends with `(` or `[` (a method chain, an argument list)."""
    out = ""
    for line in (part.strip() for part in text.strip().splitlines()):
        if not line:
            continue
        glue = not out or out.endswith(("(", "[")) or line.startswith((".", ")", "]", "?"))
        out += ("" if glue else " ") + line
    return out


def _flat(values) -> list:
    return [e for v in values for e in _flat(v)] if isinstance(values, list) else [values]


def _shape(values) -> list[int]:
    return [len(values), *_shape(values[0])] if isinstance(values, list) else []


def _entry(value, where: str, fw: str) -> Code:
    if isinstance(value, str):
        value = {"code": value}
    if not isinstance(value, dict):
        raise DataError(f"{where}: a string or a mapping with `code`, not {value!r}")
    unknown = set(value) - _ENTRY_KEYS
    if unknown:
        raise DataError(f"{where}: unknown keys {sorted(unknown)} (allowed: {sorted(_ENTRY_KEYS)})")
    for key in ("code", "missing", "note", "ret"):
        if key in value and not isinstance(value[key], str):
            raise DataError(f"{where}: `{key}` must be a string")
    code = one_line(value.get("code", ""))
    if not code:
        raise DataError(f"{where}: no code (a missing operation needs its workaround)")
    if "//" in code:
        raise DataError(f"{where}: no `//` comments in code (it is run as one line)")
    if value.get("missing") and value.get("note"):
        raise DataError(f"{where}: `missing` and `note` both set (say it in `missing`)")
    if value.get("ret") and fw != "dfdx":
        raise DataError(f"{where}: `ret` is for DFDX only")
    shape = value.get("shape")
    if shape is not None and not (isinstance(shape, list) and all(isinstance(d, int) for d in shape)):
        raise DataError(f"{where}: `shape` must be a list of ints")
    return Code(
        code,
        missing=one_line(value.get("missing", "")),
        note=one_line(value.get("note", "")),
        shape=None if shape is None else tuple(shape),
        ret=one_line(value.get("ret", "")),
    )


def load(
    path: Path = DATA,
) -> tuple[dict[str, list[str]], dict[str, tuple[list, str]], dict[str, str], list[Row]]:
    """(set-up lines per framework, inputs, what each input is, rows) from the data file."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or set(data) - {"shared"} != {"setup", "inputs", "groups"}:
        raise DataError(f"{path.name}: the keys are `setup`, `inputs`, `groups` (and `shared`, for anchors)")
    setup = data["setup"]
    if set(setup) != set(FRAMEWORKS) or not all(
        isinstance(lines, list) and all(isinstance(line, str) for line in lines) for lines in setup.values()
    ):
        raise DataError(f"setup: a list of lines for each of {FRAMEWORKS}")
    inputs, about = {}, {}
    for name, spec in data["inputs"].items():
        if not (
            isinstance(spec, dict)
            and {"kind", "values"} <= set(spec) <= {"kind", "values", "about"}
            and spec["kind"] in _KINDS
        ):
            raise DataError(f"inputs.{name}: {{kind: float|int, values: [...], about: optional text}}")
        about[name] = spec.get("about", "")
        number = float if spec["kind"] == "float" else int
        if not all(type(e) is number for e in _flat(spec["values"])):
            raise DataError(
                f"inputs.{name}: every value of a {spec['kind']} input is written as one (1.0, 1)"
            )
        inputs[name] = (spec["values"], spec["kind"])
    rows: list[Row] = []
    for group in data["groups"]:
        if not (isinstance(group, dict) and set(group) == {"group", "rows"}):
            raise DataError(f"groups: each item is {{group: title, rows: [...]}}, not {group!r}")
        for item in group["rows"]:
            where = f"{group['group']} / {item.get('name', '?') if isinstance(item, dict) else item!r}"
            if not isinstance(item, dict) or set(item) != _ROW_KEYS:
                keys = sorted(item) if isinstance(item, dict) else item
                raise DataError(f"{where}: a row has exactly the keys {sorted(_ROW_KEYS)}, not {keys}")
            if not (isinstance(item["name"], str) and isinstance(item["torch"], str)):
                raise DataError(f"{where}: `name` and `torch` are strings")
            if "\n" in item["torch"].strip():
                raise DataError(f"{where}: `torch` is one line (separate statements with `;`)")
            entries = {fw: _entry(item[fw], f"{where} / {fw}", fw) for fw in FRAMEWORKS}
            rows.append(Row(item["name"], group["group"], item["torch"].strip(), **entries))
    names = [r.name for r in rows]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise DataError(f"row names must be unique: {duplicates}")
    return {fw: list(setup[fw]) for fw in FRAMEWORKS}, inputs, about, rows


# What each framework's table entries assume (imports, the device), the inputs every row may
# use (name -> (nested values, element type)), what each input is, and the rows, in the page's order.
SETUP, INPUTS, INPUT_ABOUT, ROWS = load()
GROUPS = list(dict.fromkeys(r.group for r in ROWS))

# -- the Rust programs ----------------------------------------------------------------------------

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
impl CsData for usize {
    fn cs_data(&self) -> Result<CsOut, String> { Ok((vec![], vec![*self as f32])) }
}
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
impl CsData for usize {
    fn cs_data(&self) -> candle_core::Result<CsOut> { Ok((vec![], vec![*self as f32])) }
}
impl CsData for Tensor {
    fn cs_data(&self) -> candle_core::Result<CsOut> {
        Ok((self.dims().to_vec(), self.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?))
    }
}
""",
    "burn": r"""
trait CsData { fn cs_data(&self) -> Result<CsOut, String>; }
impl CsData for usize {
    fn cs_data(&self) -> Result<CsOut, String> { Ok((vec![], vec![*self as f32])) }
}
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
impl CsData for usize {
    fn cs_data(&self) -> Result<CsOut, String> { Ok((vec![], vec![*self as f32])) }
}
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
    """Evaluate the row's PyTorch code on the inputs: (shape, flat float values). The code is
    one expression, or statements separated by `;` whose last one is the expression."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch import nn

    scope = {"torch": torch, "nn": nn, "F": F, **torch_inputs()}
    *statements, last = ast.parse(row.torch).body
    if not isinstance(last, ast.Expr):
        raise ValueError(f"{row.name}: the PyTorch code must end with an expression")
    torch.manual_seed(0)  # a module's initial weights, before the row replaces them
    exec(compile(ast.Module(statements, type_ignores=[]), row.name, "exec"), scope)  # noqa: S102
    value = eval(compile(ast.Expression(last.value), row.name, "eval"), scope)  # noqa: S307
    value = torch.as_tensor(value).detach()
    return list(value.shape), value.to(torch.float64).flatten().tolist()


def _run(kernel, code: str) -> tuple[str, str | None]:
    """One cell in `kernel` (a KernelSession): its stdout, and its error or None."""
    ran = kernel.run(code, timeout=1200)
    return ran.stream("stdout"), ran.error


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


def check(fw: str, kernel=None, rows: list[Row] | None = None) -> dict[str, str]:
    """Run every row in `fw` and compare with PyTorch: {row name: problem} for the rows that
    fail (empty when all pass). When the program does not compile, each row is compiled on
    its own so that the failures name their rows."""
    rows = ROWS if rows is None else rows
    own = kernel is None
    if own:
        from ..kernel.session import KernelSession

        kernel = KernelSession(cwd=ROOT)
    try:
        deps, helpers, main = program(fw, rows)
        for cell in (deps, helpers):
            _, error = _run(kernel, cell)
            if error:
                return {"(set-up)": error}
        stdout, error = _run(kernel, main)
        results = parse(stdout)
        if error and not results:  # a compile error: find the rows that cause it
            for i, row in enumerate(rows):
                out, row_error = _run(kernel, _main(fw, [row], f"cs_row_{i}"))
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
        "<!-- Generated from coursekit/content/cheatsheet.yaml by `python -m coursekit cheatsheet --write`; "
        "do not edit. -->",
        "",
        f"{len(ROWS)} PyTorch operations and their equivalents in tch {versions['tch']}, "
        f"Candle {versions['candle']}, Burn {versions['burn']} (NdArray backend) and "
        f"DFDX {versions['dfdx']}. "
        "Where a framework has no such operation, the entry says so (—) and gives the workaround.",
        "",
        "Sections: " + "; ".join(f"{g} ({sum(r.group == g for r in ROWS)})" for g in GROUPS) + ".",
        "",
        "**How it is checked.** Every entry in this table — each workaround included — is the exact "
        "code that `tests/test_cheatsheet.py` runs: one Rust program per framework, in the course "
        "kernel, builds the inputs below, evaluates every row and prints the result; each result must "
        f"have PyTorch's shape and match PyTorch {torch_version}'s values on the same inputs within "
        f"`numpy.allclose(rtol={TOLERANCE['rtol']:g}, atol={TOLERANCE['atol']:g})`. An entry whose shape "
        "differs on purpose says so, and that shape is checked instead. The rows are data "
        "(`coursekit/content/cheatsheet.yaml`); the same test checks that this page is exactly what "
        "`coursekit.content.cheatsheet.render_markdown()` produces from them.",
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
        "from torch import nn",
    ]
    for name, (values, kind) in INPUTS.items():
        dtype = "" if kind == "float" else ", dtype=torch.int64"
        comment = f"  # {INPUT_ABOUT[name]}" if INPUT_ABOUT[name] else ""
        lines.append(f"{name} = torch.tensor({values}{dtype}){comment}")
    lines += ["```", ""]
    lines.append(
        "Each framework's table entries assume these imports and inputs. A PyTorch entry is an "
        "expression, or statements separated by `;` whose last one is the value checked; a Rust entry "
        "is an expression, often a block `{ ... }` that builds what it needs (a `VarStore`, a module) "
        "and ends with the value checked — a tensor, or a `usize` for a count. Burn and DFDX operations "
        "take their inputs by value, so the check runs every row on fresh clones (write `a.clone()` "
        "where you still need `a`). Candle's `?` needs a function returning `candle_core::Result`. "
        "DFDX entries are evaluated as `let r: Tensor<_, f32, Cpu> = ...;` (creation functions take "
        "the element type from the context) unless the result has another type."
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
