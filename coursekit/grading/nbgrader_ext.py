"""nbgrader for a notebook of Rust cells with `%%python` cells among them.

nbgrader picks one code stub per notebook, from the kernelspec's language (`rust`):
`%%python` cells get the Python stub instead, after their `%%python` line.
"""

from __future__ import annotations

from nbgrader.preprocessors import ClearSolutions as _ClearSolutions

from ..content.notebooks import PYTHON_MAGIC, split_python


class ClearSolutions(_ClearSolutions):
    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type != "code" or split_python(cell.source) is None:
            return super().preprocess_cell(cell, resources, cell_index)
        language = resources["language"]
        resources["language"] = "python"
        try:
            cell, resources = super().preprocess_cell(cell, resources, cell_index)
        finally:
            resources["language"] = language
        if split_python(cell.source) is None:  # a whole-cell solution became the bare stub
            cell.source = f"{PYTHON_MAGIC}\n{cell.source}"
        return cell, resources
