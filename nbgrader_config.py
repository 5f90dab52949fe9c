"""nbgrader configuration of the course: solutions/ is the instructor's source, exercises/
the generated student release. Rust cells get a `todo!()` stub, `%%python` cells a Python
one (coursekit.grading.nbgrader_ext)."""

from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ComputeChecksums,
    IncludeHeaderFooter,
    InstantiateTests,
    LockCells,
    SaveCells,
)
from nbgrader.validator import Validator

from coursekit.grading.harness import GradedExecute
from coursekit.grading.nbgrader_ext import ClearAnswerMetadata, ClearSolutions

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "rust-for-pytorch"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"

c.ClearSolutions.code_stub = {
    "rust": "// YOUR CODE HERE\ntodo!()",
    "python": "# YOUR CODE HERE\nraise NotImplementedError()",
}
c.GenerateAssignment.preprocessors = [
    IncludeHeaderFooter,
    InstantiateTests,
    LockCells,
    ClearSolutions,
    ClearAnswerMetadata,
    ClearOutput,
    CheckCellMetadata,
    ComputeChecksums,
    SaveCells,
    ClearHiddenTests,
    ClearMarkScheme,
    ComputeChecksums,
    CheckCellMetadata,
]

# A framework notebook's first cell may compile for minutes on a cold machine.
c.Execute.timeout = 900
c.Execute.startup_timeout = 180

# nbgrader's Validate runs the tests as `coursekit grade` and `coursekit check` do (each
# test cell inside the harness of coursekit/grading/harness.py), so all three agree.
# Validator's list of preprocessors is not a configurable trait: its default is set here.
Validator.preprocessors.default_value = [CheckCellMetadata, ClearOutput, GradedExecute]
