"""`coursekit check NOTEBOOK`: grade a learner's exercise notebook with its visible and
hidden tests, task by task, as the instructor's grader would (without the sandbox: it is
the learner's own code on the learner's machine)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import nbformat

from ..grading.grade import Settings, Submission, Templates, kernel_env, run_job
from ..kernel.session import KernelAhead
from ..setup import slots
from . import exercises, memory, progress

CHECK_CELL_TIMEOUT_S = 900
AHEAD_NEEDS = 512 << 20  # bytes free for `watch` to hold a kernel between checks (Burn's: 80 MiB)
TEMPLATES = slots.cache_dir() / "check-templates"  # released notebooks, kept between checks
OUT_OF_MEMORY = (
    "Memory ran out during the check, and the system stopped the check's kernel (your open "
    "notebooks' kernels were left alone). Free memory, then check again: shut down the kernels "
    "of the notebooks you are not using (JupyterLab: Kernel > Shut Down Kernel, or close the "
    "notebook's tab). On Binder (2 GB), a check of a framework exercise does not fit beside "
    "another notebook's framework kernel."
)
GREEN, RED, DIM, END = "\033[32m", "\033[31m", "\033[2m", "\033[0m"


def check(notebook: Path, hints: bool = False, color: bool = True) -> int:
    tasks = exercise_tasks(notebook)
    if not tasks:
        return 2
    ahead = start_ahead(notebook)  # it loads the notebook's crates while nbgrader starts
    try:
        lines, results, summary = verdicts(notebook, tasks, hints, color, ahead)
    finally:
        if ahead is not None:
            ahead.close()
    print("\n".join(lines + [text for _, text in results.values()] + [summary]))
    if not results:  # not checked: memory ran out
        return 3
    return 0 if all(ok for ok, _ in results.values()) else 1


def exercise_tasks(notebook: Path) -> list[exercises.Task]:
    """The tasks of an exercise notebook; none, with a message, for any other file."""
    notebook = notebook.resolve()
    assignment = notebook.parent.name
    found = [t for t in exercises.all_tasks() if t.assignment == assignment and t.notebook == notebook.name]
    if not found:
        print(f"{notebook} is not an exercise notebook of this course (exercises/ASSIGNMENT/NAME.ipynb)")
    return found


def verdicts(notebook: Path, tasks: list, hints=False, color=True, ahead: KernelAhead | None = None):
    """Grade `notebook`, whose tasks are `tasks`: (notes and errors, {task key: (passes, its
    report)}, the score line). `ahead`: a kernel to run it in first. No verdicts where memory
    ran out during the check: the system then stopped the check's own kernel (a check's
    kernels volunteer: see kernel.main), and which tasks failed would mean nothing."""
    notebook = notebook.resolve()
    assignment = notebook.parent.name
    print(f"checking {assignment}/{notebook.name} (visible and hidden tests) ...", flush=True)
    g, r, d, e = (GREEN, RED, DIM, END) if color else ("", "", "", "")
    started = time.monotonic()

    kills = memory.oom_kills()

    def ran_out() -> str | None:  # then the check stops: each new kernel would run out too
        return "memory ran out" if memory.oom_kills() > kills else None

    def running(line: str) -> None:  # while it runs: the kernel started, each test's verdict
        if not ran_out():  # verdicts from then on would mislead
            print(f"  {d}[{time.monotonic() - started:4.0f} s] {line}{e}", flush=True)

    with tempfile.TemporaryDirectory(prefix="coursekit-check-") as work:
        record = run_job(
            Submission("you", assignment, notebook.name, notebook),
            Templates(Path(work), cache=TEMPLATES),
            Path(work),
            # the learner's own code on their machine: no sandbox, and time for a cold first
            # compile of a framework on one slow CPU
            Settings(sandboxed=False, cell_timeout=CHECK_CELL_TIMEOUT_S),
            progress=running,
            kernel_ahead=ahead.handoff if ahead else None,
            stop_when=ran_out,
        )
    if ran_out():
        return [f"  {r}{OUT_OF_MEMORY}{e}"], {}, "not checked: memory ran out"
    lines = [f"  {d}note: {note}{e}" for note in record.notes]
    if record.error:
        lines.append(f"  {r}{record.error}{e}")
    results = {}
    for task in tasks:
        scores = [record.tasks.get(t, [0.0, 0.0, None]) for t in task.tests]
        ok = bool(scores) and all(s[0] == s[1] for s in scores) and not record.error
        got = sum(s[0] for s in scores)
        mark = f"{g}PASS{e}" if ok else f"{r}FAIL{e}"
        text = [f"  {mark} {task.id:28} {got:g}/{task.points:g}  {task.title}"]
        if not ok:
            own = record.answers.get(task.id)
            if own:  # the learner's own cell failed: that is the error to read first
                text.append(indent(f"your code for {task.id}: {own}", 7))
            for test, s in zip(task.tests, scores, strict=True):
                if s[0] != s[1] and s[2] and not own:
                    text.append(indent(f"{test}: {s[2]}", 7))
            if task.hints and hints:
                text.append(f"       {d}hint: {task.hints[0]}{e}")
            elif task.hints:
                text.append(f"       {d}stuck? `coursekit hint {task.key}` gives a hint{e}")
        results[task.key] = (ok, "\n".join(text))
    progress.save_results({key: ok for key, (ok, _) in results.items()})
    passed = sum(ok for ok, _ in results.values())
    summary = f"{passed}/{len(results)} tasks pass; score {record.score:g}/{record.max_score:g}"
    return lines, results, summary


def code_of(notebook: Path) -> str:
    """What a check depends on: the code of the notebook's cells (not their outputs)."""
    try:
        nb = nbformat.read(notebook, as_version=4)
    except (OSError, ValueError) as exc:  # half-written by an editor, or not a notebook
        return f"unreadable: {exc}"
    return "\n\0".join(c.source for c in nb.cells if c.cell_type == "code")


def kernel_ahead(notebook: Path) -> KernelAhead:
    """A kernel for the next check of `notebook`, started now, with the environment a check's
    kernel gets; it loads the notebook's crates while the learner edits."""
    notebook = notebook.resolve()
    assignment = notebook.parent.name
    with tempfile.TemporaryDirectory(prefix="coursekit-check-") as work:
        template = Templates(Path(work), cache=TEMPLATES).get(assignment, notebook.name)
        released = nbformat.read(template / "exercises" / assignment / notebook.name, as_version=4)
    return KernelAhead(notebook, kernel_env(released))


def start_ahead(notebook: Path) -> KernelAhead | None:
    """`kernel_ahead(notebook)`, or None (and why) where it could not start: the check then
    starts its own kernel."""
    try:
        return kernel_ahead(notebook)
    except (OSError, RuntimeError) as exc:
        print(f"  (the check's kernel could not be started ahead: {exc})")
        return None


def watch(notebook: Path, hints: bool = False, color: bool = True, interval: float = 1.0, rounds=None) -> int:
    """`coursekit watch`: check again each time the notebook is saved with changed code, like
    `rustlings watch`; after the first check, only the tasks whose verdict or report changed.
    After each verdict the next check's kernel starts and loads the notebook's crates while the
    learner edits, so that check skips a fresh kernel's start (3-6 s with a framework). That
    kernel holds a little memory meanwhile (its analyzer indexes nothing, PyTorch is imported
    when the check runs): it starts only where AHEAD_NEEDS is free."""
    tasks = exercise_tasks(notebook)
    if not tasks:
        return 2
    previous: dict | None = None
    seen = None
    done = 0
    ahead = None
    print(f"watching {notebook}: save it to check again (Ctrl-C stops)")
    try:
        while rounds is None or done < rounds:
            code = code_of(notebook)
            if code == seen:
                time.sleep(interval)
                continue
            seen, done = code, done + 1
            try:
                lines, results, summary = verdicts(notebook, tasks, hints, color, ahead)
            finally:
                if ahead is not None:
                    ahead.close()
                    ahead = None
            texts = {key: text for key, (_, text) in results.items()}
            changed = [text for key, text in texts.items() if previous is None or previous.get(key) != text]
            unchanged = ["  (no task changed)"] if results and not changed else []
            print("\n".join(lines + changed + unchanged + [summary]), flush=True)
            previous = texts
            if rounds is not None and done == rounds:
                break
            if memory.free() < AHEAD_NEEDS:
                print("  (too little memory free to prepare the next check: it will start a fresh kernel)")
                continue
            ahead = start_ahead(notebook)
    except KeyboardInterrupt:
        pass
    finally:
        if ahead is not None:
            ahead.close()
    return 0


def indent(message: str, by: int, max_lines: int = 25, max_chars: int = 3000) -> str:
    """A whole message, indented, cut only when very long."""
    text = message.strip()
    lines = text[:max_chars].splitlines()
    cut = len(lines) > max_lines or len(text) > max_chars
    lines = lines[:max_lines] + (["[…]"] if cut else [])
    return "\n".join(" " * by + line for line in lines)


def hint(name: str) -> int:
    """The next hint of a task: a nudge first, then a stronger one (like rustlings' hints)."""
    task = exercises.find(name)
    if not task.hints:
        print(f"{task.key} has no hint; its lesson is {exercises.lesson_of(task)}")
        return 0
    seen = progress.next_hint(task, len(task.hints))
    print(f"hint {seen + 1}/{len(task.hints)} for {task.key} ({task.title}):\n  {task.hints[seen]}")
    if seen + 1 == len(task.hints):
        print(
            f"That was the last hint. Once the task passes, `coursekit solution {task.key}` shows an answer."
        )
    return 0
