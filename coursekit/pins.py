"""Read the kit's pins (coursekit/pins.toml and requirements.txt), and the rustc they run with."""

from __future__ import annotations

import re
import subprocess
import tomllib
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).parent
ROOT = PACKAGE.parent


@cache
def pins() -> dict:
    return tomllib.loads((PACKAGE / "pins.toml").read_text())


def frameworks() -> dict[str, dict]:
    return pins()["frameworks"]


def evcxr_version() -> str:
    return pins()["evcxr"]["version"]


def crates() -> dict[str, dict]:
    """Frameworks and the extra crates, by name."""
    return {**frameworks(), **pins().get("extras", {})}


def dep_lines(name: str) -> list[str]:
    """The `:dep` lines a notebook using this framework (or extra crate) starts with."""
    return [f":dep {dep}" for dep in crates()[name]["deps"]]


@cache
def python_requirements() -> dict[str, str]:
    """name -> exact version, from requirements.txt."""
    reqs = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;#]+)", line.strip())
        if m:
            reqs[re.sub(r"\[.*\]", "", m.group(1)).lower()] = m.group(2)
    return reqs


@cache
def rustc_banner() -> str:
    """`rustc --version` of the active toolchain ('' when rustc does not run)."""
    try:
        out = subprocess.run(["rustc", "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def rustc_version() -> str:
    """The active rustc's version, X.Y.Z ('' when rustc does not run)."""
    m = re.match(r"rustc (\d+\.\d+\.\d+)", rustc_banner())
    return m.group(1) if m else ""
