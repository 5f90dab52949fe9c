"""Values crossing between Rust and Python cells.

Rust -> Python: the prelude's `share("name", &value)` prints the value's `{:?}` text;
`parse_debug` turns it into Python (numbers, bools, strings, Vec/arrays/tuples,
Option, structs as dicts).
Python -> Rust: `to_rust("name", value)` in a `%%python` cell; `rust_binding` writes
the `let` statement the kernel then runs in evcxr.
"""

from __future__ import annotations

import math
import re

MAX_ELEMENTS = 100_000  # beyond this, pass a safetensors file instead

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>[-+]?(?:\d[\d_]*\.?\d*(?:[eE][-+]?\d+)?|inf|NaN))(?![\w.])
    | (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<char>'(?:[^'\\]|\\.|\\u\{[0-9a-fA-F]+\})')
    | (?P<ident>[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)
    | (?P<punct>[\[\](){},:])
    )""",
    re.VERBOSE,
)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'"}


def _unescape(body: str) -> str:
    def repl(m: re.Match) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        return _ESCAPES.get(m.group(2), m.group(2))

    return re.sub(r"\\(?:u\{([0-9a-fA-F]+)\}|(.))", repl, body)


class _Parser:
    def __init__(self, text: str):
        self.tokens = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"cannot read Rust value near {text[pos : pos + 20]!r}")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else (None, None)

    def take(self, value=None):
        tok = self.peek()
        if tok[0] is None or (value is not None and tok[1] != value):
            raise ValueError(f"expected {value or 'a value'}, found {tok[1]!r}")
        self.i += 1
        return tok

    def seq(self, close):
        items = []
        while self.peek()[1] != close:
            items.append(self.value())
            if self.peek()[1] == ",":
                self.take(",")
        self.take(close)
        return items

    def value(self):
        kind, tok = self.take()
        if kind == "num":
            text = tok.replace("_", "")
            if text.lstrip("+-") in ("inf", "NaN"):
                return float(text.replace("NaN", "nan"))
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "str":
            return _unescape(tok[1:-1])
        if kind == "char":
            return _unescape(tok[1:-1])
        if tok == "[":
            return self.seq("]")
        if tok == "(":
            items = self.seq(")")
            return tuple(items)
        if kind == "ident":
            if tok in ("true", "false"):
                return tok == "true"
            if tok == "None":
                return None
            nxt = self.peek()[1]
            if tok == "Some" and nxt == "(":
                self.take("(")
                (inner,) = self.seq(")")
                return inner
            if nxt == "{":  # struct: Name { field: value, .. }
                self.take("{")
                fields = {}
                while self.peek()[1] != "}":
                    name = self.take()[1]
                    self.take(":")
                    fields[name] = self.value()
                    if self.peek()[1] == ",":
                        self.take(",")
                self.take("}")
                return fields
            if nxt == "(":  # tuple struct: Name(a, b)
                self.take("(")
                items = self.seq(")")
                return items[0] if len(items) == 1 else tuple(items)
            return tok  # unit struct or enum variant
        raise ValueError(f"unexpected {tok!r} in Rust value")


def parse_debug(text: str):
    """Python value of a Rust `{:?}` rendering."""
    parser = _Parser(text)
    result = parser.value()
    if parser.peek()[0] is not None:
        raise ValueError(f"unexpected {parser.peek()[1]!r} after the value")
    return result


class SharedValues(dict):
    """`rust` in Python cells: the values Rust cells shared, by name or attribute."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f'no Rust value named {name!r} was shared; in a Rust cell call share("{name}", &value) first'
            ) from None


# --- Python -> Rust -------------------------------------------------------------

_RUST_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def _float(x: float, ty: str = "f64") -> str:
    if math.isnan(x):
        return f"{ty}::NAN"
    if math.isinf(x):
        return f"{ty}::INFINITY" if x > 0 else f"{ty}::NEG_INFINITY"
    text = repr(float(x))
    return text if any(c in text for c in ".e") else text + ".0"


def _literal(value, depth=0) -> tuple[str, str]:
    """(Rust type, Rust literal) of a Python value."""
    if isinstance(value, bool):
        return "bool", "true" if value else "false"
    if isinstance(value, int):
        return "i64", str(value)
    if isinstance(value, float):
        return "f64", _float(value)
    if isinstance(value, str):
        return "String", f"String::from({_rust_str(value)})"
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("cannot infer the Rust type of an empty list; pass at least one element")
        parts = [_literal(v, depth + 1) for v in value]
        types = {t for t, _ in parts}
        if types == {"i64", "f64"}:
            parts = [("f64", _float(float(v))) for v in value]
            types = {"f64"}
        if len(types) != 1:
            raise ValueError(f"a list sent to Rust needs elements of one type, got {sorted(types)}")
        return f"Vec<{types.pop()}>", "vec![" + ", ".join(lit for _, lit in parts) + "]"
    raise TypeError(f"cannot send a {type(value).__name__} to Rust")


def _rust_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def rust_binding(name: str, value) -> str:
    """The Rust statements that bind `name` to `value` in the evcxr session."""
    if not _RUST_NAME.match(name):
        raise ValueError(f"{name!r} is not a snake_case Rust variable name")
    if hasattr(value, "detach"):  # torch.Tensor
        value = value.detach().cpu().numpy()
    if hasattr(value, "shape") and hasattr(value, "ravel"):  # numpy array
        if value.size > MAX_ELEMENTS:
            raise ValueError(
                f"{name!r} has {value.size} elements; pass more than {MAX_ELEMENTS} through a "
                "safetensors file (see course/00_welcome.ipynb)"
            )
        # each element's f32 bits as 8 hex digits, decoded by the prelude (see f32s_from_hex)
        data = value.astype(">f4").tobytes().hex()
        shape = ", ".join(str(d) for d in value.shape)
        return (
            f'let {name}: Vec<f32> = coursekit_prelude::f32s_from_hex("{data}");\n'
            f"let {name}_shape: Vec<usize> = vec![{shape}];"
        )
    rust_type, literal = _literal(value)
    if literal.count(",") >= MAX_ELEMENTS:
        raise ValueError(f"{name!r} is too large to send as a literal; use a safetensors file")
    return f"let {name}: {rust_type} = {literal};"
