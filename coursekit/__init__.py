"""coursekit: the tooling of the Rust-for-PyTorch-developers course.

kernel/    the rust-pytorch Jupyter kernel (evcxr child, outputs, values, Rust prelude)
setup/     installing, configuring and checking what the kernel needs
grading/   the sandboxed batch grader and its nbgrader pieces
learner/   the learner's check, progress and hints
content/   the course notebooks' helpers and the cheat-sheet
"""


def show_versions(*frameworks: str) -> None:
    """Print what a notebook runs with (every course notebook calls it in its first cells)."""
    from .content.notebooks import show_versions as show

    show(*frameworks)
