"""The Pygments lexer of the `rust-pytorch` kernel's cells: Rust, except a cell whose first
line is `%%python`, whose body is Python. nbconvert (and so nbgrader's feedback pages)
highlights with the lexer the notebook's `language_info.pygments_lexer` names; this one is
registered as `rust-pytorch` (pyproject.toml's `pygments.lexers` entry point)."""

from __future__ import annotations

from pygments.lexer import Lexer
from pygments.lexers.python import PythonLexer
from pygments.lexers.rust import RustLexer
from pygments.token import Comment, Text

from .notebooks import PYTHON_MAGIC, split_python


class RustPyTorchLexer(Lexer):
    name = "Rust + PyTorch"
    aliases = ["rust-pytorch"]
    mimetypes = ["text/x-rust-pytorch"]

    def get_tokens_unprocessed(self, text):
        body = split_python(text)
        if body is None:
            yield from RustLexer(**self.options).get_tokens_unprocessed(text)
            return
        start = text.index(PYTHON_MAGIC)
        if start:
            yield 0, Text.Whitespace, text[:start]
        head = len(text) - len(body)
        yield start, Comment.Preproc, text[start:head]
        for offset, token, value in PythonLexer(**self.options).get_tokens_unprocessed(body):
            yield head + offset, token, value
