"""nbgrader for the course's notebooks: Rust cells with `%%python` cells among them, and
course metadata that must not reach students.

nbgrader picks one code stub per notebook, from the kernelspec's language (`rust`):
`%%python` cells get the Python stub instead, after their `%%python` line. A task's hints and
known-wrong solutions (cell metadata `coursekit.hint`, `coursekit.wrong`) stay in the
instructor's source: `coursekit hint` reads them there.
"""

from __future__ import annotations

from nbgrader.preprocessors import ClearSolutions as _ClearSolutions
from nbgrader.preprocessors import NbGraderPreprocessor

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


class ClearAnswerMetadata(NbGraderPreprocessor):
    """Drop the hints and the known-wrong solutions from the released notebooks."""

    def preprocess_cell(self, cell, resources, cell_index):
        meta = cell.metadata.get("coursekit")
        if meta:
            for key in ("hint", "wrong"):
                meta.pop(key, None)
            if not meta:
                del cell.metadata["coursekit"]
        return cell, resources
