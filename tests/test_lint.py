"""The Python tooling passes ruff (lint and format), as the pre-commit hook enforces; no cache, which can
hide what a clean clone sees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT

RUFF = str(Path(sys.executable).parent / "ruff")
PATHS = ["coursekit", "tests", "ship", "bench", "conftest.py", "nbgrader_config.py"]


def test_ruff_check():
    result = subprocess.run([RUFF, "check", "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_ruff_format():
    result = subprocess.run(
        [RUFF, "format", "--check", "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout
