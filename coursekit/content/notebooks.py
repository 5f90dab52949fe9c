"""The course's notebook files: cell languages, metadata, and regenerating outputs.

`python -m coursekit run NOTEBOOK...` executes notebooks in the rust-pytorch kernel and
saves their outputs, cleaned of execution noise, so that diffs stay reviewable and the
test suite (nbval) can check that every committed output is reproduced.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing nbformat costs a second (jsonschema's format checkers): the
    import nbformat  # kernel, the lexer and the notebooks' version cells do without it

PYTHON_MAGIC = "%%python"
KERNELSPEC = {"name": "rust-pytorch", "display_name": "Rust + PyTorch", "language": "rust"}
LANGUAGE_INFO = {
    "name": "Rust",
    "mimetype": "text/rust",
    "file_extension": ".rs",
    # Highlighting: Rust, and `%%python` cells as Python, by the kit's Pygments lexer
    # (content/lexer.py) and JupyterLab extension (kernel/highlight); a front end without the
    # extension finds Rust by the MIME type.
    "pygments_lexer": "rust-pytorch",
    "codemirror_mode": {"name": "rust-pytorch", "mime": "text/x-rustsrc"},
}
# Cell tags the course uses: an expected error (a deliberately failing example), and
# outputs that are truly nondeterministic (timings).
RAISES = "raises-exception"
IGNORE_OUTPUT = "nbval-ignore-output"


def split_python(code: str) -> str | None:
    """The Python body of a `%%python` cell, or None for a Rust cell."""
    first, _, body = code.lstrip("\n").partition("\n")
    return body if first.strip() == PYTHON_MAGIC else None


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop what changes on every run but says nothing: execution timestamps, widget
    state, the kernel's version number."""
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = dict(LANGUAGE_INFO)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("collapsed", None)
        cell.metadata.pop("scrolled", None)
        if cell.cell_type == "code":
            for out in cell.outputs:
                out.get("metadata", {}).pop("execution", None)
    return nb


def execute(path: Path, timeout: int = 1800) -> nbformat.NotebookNode:
    """Run a notebook top to bottom in its directory and save it with its new outputs; an
    output that only differs from the committed one by floating-point noise stays as it was."""
    import shutil

    import nbformat
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    from ..kernel.session import ipc_manager
    from .float_noise import keep_matching

    nb = nbformat.read(path, as_version=4)
    committed = [cell.get("outputs", []) for cell in nb.cells]
    km, runtime = ipc_manager(KERNELSPEC["name"], manager_class=AsyncKernelManager)
    client = NotebookClient(
        nb, km=km, timeout=timeout, resources={"metadata": {"path": str(Path(path).parent)}}
    )
    client.owns_km = True  # shut the kernel down when done
    try:
        client.execute()
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    for cell, old in zip(nb.cells, committed, strict=True):
        if cell.cell_type == "code":
            cell.outputs = keep_matching(cell.outputs, old)
    nbformat.write(clean(nb), path)
    return nb


def show_versions(*frameworks: str) -> None:
    """Print what this notebook runs with: Python, torch, rustc, evcxr and the framework pins.
    Every course notebook calls it in its first cells."""
    import platform

    import torch

    from .. import pins

    print(
        f"Python {platform.python_version()} · torch {torch.__version__.split('+')[0]} · "
        f"rustc {pins.rustc_version() or '?'} · evcxr_jupyter {pins.evcxr_version()}"
    )
    for fw in frameworks:
        print(f"{fw}: " + " · ".join(pins.dep_lines(fw)))
