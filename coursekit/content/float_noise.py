"""Committed outputs against new ones, up to floating-point noise.

The same float32 computation rounds differently on two CPUs (AMD and Intel take different
SIMD paths in PyTorch's and the frameworks' kernels), so a printed `max |Burn - PyTorch| =
2.4e-7` reads 4.8e-7 on another machine, and a loss printed to four places can move by one in
its last digit. Everything else must be reproduced exactly: the text around the numbers,
how many there are, and every integer (counts, shapes, classes). The cells' own asserts are
what check a figure's tolerance; this only keeps the committed outputs comparable across
machines. Used by nbval (conftest.py), by the solutions' output check
(tests/test_exercises.py), and by `coursekit run`, which keeps a committed output the new
run matches, so that re-running a notebook on another machine does not rewrite its noise.
"""

from __future__ import annotations

import copy
import re

# A number: an integer, a decimal, or either with an exponent.
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?!\w|\.\d)")
ABSOLUTE = 2e-6  # a few float32 roundings of values of order 1
RELATIVE = 1e-5  # the same for larger values


def _is_float(token: str) -> bool:
    return any(c in token for c in ".eE")


def _last_place(token: str) -> float:
    """One unit in the last printed digit: 0.01 for `0.12`, 1e-8 for `4.5e-7`."""
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _numbers_match(ref: str, new: str) -> bool:
    if not (_is_float(ref) and _is_float(new)):
        return ref == new  # integers are exact
    a, b = float(ref), float(new)
    # Two roundings of nearly the same value differ by at most one unit in the last place.
    tolerance = max(ABSOLUTE, RELATIVE * max(abs(a), abs(b)), 1.01 * min(_last_place(ref), _last_place(new)))
    return abs(a - b) <= tolerance


def _skeleton(text: str) -> str:
    """The text with its numbers taken out; runs of spaces count as one (PyTorch pads columns
    to the widest number)."""
    return re.sub(r" +", " ", NUMBER.sub("#", text))


def same_text(ref: str, new: str) -> bool:
    """Whether `new` reproduces `ref` up to floating-point noise."""
    if ref == new:
        return True
    if _skeleton(ref) != _skeleton(new):
        return False
    ref_numbers, new_numbers = NUMBER.findall(ref), NUMBER.findall(new)
    return len(ref_numbers) == len(new_numbers) and all(map(_numbers_match, ref_numbers, new_numbers))


def _text(value) -> str | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return value if isinstance(value, str) else None


def keep_matching(new: list, ref: list) -> list:
    """`new` outputs (Jupyter output dicts), where each text that reproduces the output at
    the same position in `ref` up to noise is replaced by `ref`'s: an exact comparison of
    the result with `ref` then fails only on real differences."""
    kept = []
    for i, out in enumerate(new):
        old = ref[i] if i < len(ref) else None
        if old is None or old.get("output_type") != out.get("output_type"):
            kept.append(out)
            continue
        out = copy.deepcopy(out)
        if out.get("output_type") == "stream" and out.get("name") == old.get("name"):
            a, b = _text(old.get("text")), _text(out.get("text"))
            if a is not None and b is not None and same_text(a, b):
                out["text"] = old["text"]
        for mime, value in out.get("data", {}).items():
            a, b = _text(old.get("data", {}).get(mime)), _text(value)
            if a is not None and b is not None and same_text(a, b):
                out["data"][mime] = old["data"][mime]
        kept.append(out)
    return kept
