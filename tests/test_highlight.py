"""`%%python` cells look like Python: the Pygments lexer that nbconvert (and nbgrader's
feedback) uses, and the prebuilt JupyterLab extension (tests/test_browser.py checks it in
JupyterLab)."""

from __future__ import annotations

import json

import nbformat
from pygments.lexers import get_lexer_by_name
from pygments.token import Keyword, Name

from conftest import ROOT
from coursekit.content.notebooks import LANGUAGE_INFO, clean


def tokens(code: str) -> dict[str, object]:
    lexer = get_lexer_by_name(LANGUAGE_INFO["pygments_lexer"])
    return {value.strip(): token for token, value in lexer.get_tokens(code) if value.strip()}


def test_python_cells_are_lexed_as_python_and_rust_cells_as_rust():
    python = tokens("\n%%python\nimport torch\ndef f(x):\n    return x\n")
    assert python["import"] in Keyword and python["def"] in Keyword and python["return"] in Keyword
    assert python["%%python"] not in Keyword
    rust = tokens("let import = 1;\nfn f() {}\n")
    assert rust["let"] in Keyword and rust["fn"] in Keyword
    assert rust["import"] in Name  # not a Rust keyword
    assert tokens("%%python")  # the magic alone


def test_feedback_html_highlights_both_languages():
    from nbconvert import HTMLExporter

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("%%python\nimport torch"),
            nbformat.v4.new_code_cell("let import = 1;"),
        ]
    )
    html, _ = HTMLExporter().from_notebook_node(clean(nb))
    assert '<span class="kn">import</span>' in html  # Python's keyword.namespace
    assert (
        '<span class="kd">let</span>' in html
        and '<span class="kn">import</span>' not in html.split("let")[-1]
    )


def test_the_prebuilt_jupyterlab_extension_is_complete():
    """Built from coursekit/kernel/highlight/src (`make labextension`); set-up copies it into the
    environment, so installing needs no Node.js."""
    source = ROOT / "coursekit" / "kernel" / "highlight"
    built = json.loads((source / "labextension" / "package.json").read_text())
    meta = json.loads((source / "package.json").read_text())
    assert built["name"] == meta["name"] and built["dependencies"] == meta["dependencies"]
    assert (source / "labextension" / built["jupyterlab"]["_build"]["load"]).is_file()
    assert LANGUAGE_INFO["codemirror_mode"]["name"] == "rust-pytorch"
    assert "'rust-pytorch'" in (source / "src" / "index.ts").read_text()
    # Without the extension, JupyterLab falls back to this MIME type: its Rust language's.
    assert LANGUAGE_INFO["codemirror_mode"]["mime"] == "text/x-rustsrc"
