"""The GPU column of course/05_porting/05_benchmarks.ipynb where the course's kernel cannot
run (a GPU machine with PyTorch but no Rust toolchain): the notebook's own PyTorch cells that
have a GPU branch (set-up, matmul, ResNet-18) and its two tables, executed as plain Python.
Run from the repository root: `python3 bench/gpu_columns.py`. Figures: bench/gpu.md."""

import json
import os
import re
import time
from pathlib import Path

import torch

LESSONS = Path(__file__).resolve().parent.parent / "course" / "05_porting"
WANTED = ['print("GPU:"', "def torch_matmul", "def torch_resnet"]  # the cells with a GPU branch
TABLES = ["MLP step (µs)", "images/s at batch 16"]


def code_cells(notebook: str) -> list[str]:
    cells = json.loads((LESSONS / notebook).read_text())["cells"]
    return ["".join(c["source"]).removeprefix("%%python\n") for c in cells if c["cell_type"] == "code"]


def lesson_cell(lesson: str, first_line: str) -> str:  # as coursekit.content.measure's
    return next(c for c in code_cells(lesson) if re.search("^" + first_line, c, re.M))


class Markdown(str):  # IPython's, as text
    pass


def main() -> None:
    os.chdir(LESSONS)
    cells = code_cells("05_benchmarks.ipynb")
    ns = {"lesson_cell": lesson_cell, "Markdown": Markdown}
    for body in cells:
        if any(w in body for w in WANTED):
            started = time.perf_counter()
            exec(body, ns)
            print(f"[cell took {time.perf_counter() - started:.1f} s]", flush=True)
    for body in cells:
        if any(t in body for t in TABLES):
            *lines, last = body.replace("from IPython.display import Markdown\n", "").rstrip().split("\n")
            exec("\n".join(lines), ns)
            print(eval(last, ns))
    print("torch", torch.__version__, "CUDA", torch.version.cuda, "CPU threads", torch.get_num_threads())
    print(json.dumps(ns["results"]))


if __name__ == "__main__":
    main()
