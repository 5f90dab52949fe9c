"""`coursekit grade SUBMISSIONS`: autograde a batch of untrusted submissions.

Input, one of or both:
- folders `STUDENT/ASSIGNMENT/*.ipynb`: the student is the folder's name, as it is;
- zip files, one per student as an LMS exports them: the student is taken from the zip's
  file name (`--zip-pattern`, a regular expression with a `student` group; by default
  `STUDENT.zip` or `STUDENT_anything.zip`, nbgrader's ZipCollect convention). Every
  notebook inside belongs to that student, whatever folders it sits in; its assignment is
  its folder's name when that is an assignment, else the one whose exercise has its name.

Two inputs that are the same student's same notebook stop the batch before anything is
graded, naming both; a zip holding two copies of one notebook grades neither and says why.
Nothing is overwritten silently, and names are reported as given.

Output folder:

    results/STUDENT/ASSIGNMENT/NOTEBOOK.json   one record per graded notebook (the grade store)
    feedback/STUDENT/ASSIGNMENT/NOTEBOOK.html  nbgrader's feedback, plus repairs and flags
    grades.csv                                 one row per notebook, rebuilt from results/

(STUDENT there is the name made safe for a path, with a short hash when that changed it.)
Each notebook is graded in its own job — its own scratch nbgrader course, its kernel in
the sandbox (coursekit.grading.sandbox), its tests run by the harness
(coursekit.grading.harness) — in parallel on the available cores. A record names a hash
of everything its grade depends on, so a re-run grades only what changed; records are
written atomically, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from .. import pins
from ..content.notebooks import split_python
from ..kernel.outputs import ANSI, UNAVAILABLE_NAME
from ..pins import ROOT
from ..setup import slots
from . import harness, nbgrader_server, sandbox, submission

CELL_TIMEOUT_S = int(os.environ.get("COURSEKIT_CELL_TIMEOUT", "120"))
NOTEBOOK_TIMEOUT_S = int(os.environ.get("COURSEKIT_NOTEBOOK_TIMEOUT", "900"))
GRADE_SLOT = "grade"
ZIP_PATTERN = r"(?P<student>[^_]+)(?:_.*)?\.zip"
ZIP_LIMITS = (submission.MAX_BYTES, 500 * 2**20)  # bytes of one notebook, of all a zip unpacks to
NBGRADER_STUDENT = "student"  # the id inside a job's scratch course; the record keeps the name


class InputError(ValueError):
    """The batch's input is ambiguous (say, two inputs for one student's notebook)."""


@dataclass
class Submission:
    student: str  # as given
    assignment: str
    notebook: str  # file name
    path: Path
    source: str = ""  # where it came from, for messages
    problem: str | None = None  # why it cannot be graded, found before grading


@dataclass
class Record:
    student: str
    assignment: str
    notebook: str
    key: str
    score: float = 0.0
    max_score: float = 0.0
    tasks: dict = field(default_factory=dict)  # grade_id -> [score, max_score, message]
    notes: list = field(default_factory=list)  # repairs made before grading
    flags: list = field(default_factory=list)  # what looks like an attack, for review
    events: list = field(default_factory=list)  # limits that fired while grading
    answers: dict = field(default_factory=dict)  # answer cell's grade_id -> the error it ran into
    error: str | None = None  # why the notebook could not be graded (all tasks 0)
    status: str = "ok"  # ok, repaired, submission error, grader error
    seconds: float = 0.0
    phases: dict = field(default_factory=dict)  # where the seconds went (bench/results.md)


# -- finding submissions -------------------------------------------------------------------
def student_dir(name: str) -> str:
    """A path-safe folder name for a student; different names never share one."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._") or "unnamed"
    if safe == name:
        return safe
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def discover(src: Path, unpack_to: Path, assignments: list[str], zip_pattern: str = ZIP_PATTERN):
    """Every submitted notebook under `src` (zip files unpacked into `unpack_to`), and the
    .ipynb files that are in no place a submission can be (for a warning)."""
    found, problems = [], []
    for z in sorted(src.glob("*.zip")):
        m = re.fullmatch(zip_pattern, z.name)
        if not m or not m.groupdict().get("student"):
            problems.append(f"{z.name} does not match the zip pattern {zip_pattern!r} (see --zip-pattern)")
            continue
        student = m.group("student")
        notebooks: dict[tuple[str, str], list] = {}
        for inner, path in _unzip(z, unpack_to / uuid.uuid4().hex):
            parent = Path(inner).parent.name
            assignment = parent if parent in assignments else _guess(path.name)
            notebooks.setdefault((assignment, path.name), []).append((inner, path))
        for (assignment, name), copies in sorted(notebooks.items()):
            sub = Submission(student, assignment, name, copies[0][1], f"{z.name}:{copies[0][0]}")
            if len(copies) > 1:
                names = ", ".join(inner for inner, _ in copies)
                sub.problem = f"the zip holds {len(copies)} notebooks named {name}: {names}; none was graded"
            found.append(sub)
    for p in sorted(src.glob("*/*/*.ipynb")):
        found.append(Submission(p.parent.parent.name, p.parent.name, p.name, p, str(p.relative_to(src))))
    seen: dict[tuple, Submission] = {}
    for sub in found:
        key = (student_dir(sub.student), sub.assignment, sub.notebook)
        if key in seen:
            problems.append(
                f"{seen[key].source} and {sub.source} are both {sub.student!r}'s "
                f"{sub.assignment}/{sub.notebook}: keep one of them"
            )
        seen[key] = sub
    if problems:
        raise InputError("; ".join(problems))
    placed = {s.path for s in found}
    ignored = [
        str(p.relative_to(src))
        for p in src.rglob("*.ipynb")
        if p not in placed and ".ipynb_checkpoints" not in p.parts and unpack_to not in p.parents
    ]
    return found, ignored


def _unzip(path: Path, dest: Path) -> list[tuple[str, Path]]:
    """Extract the notebooks of a zip (never outside `dest`; size-limited): (name in the
    zip, extracted file) pairs. An unreadable zip is one invalid notebook."""
    dest.mkdir(parents=True, exist_ok=True)
    out, total = [], 0
    try:
        with zipfile.ZipFile(path) as z:
            for i, info in enumerate(z.infolist()):
                name = Path(info.filename)
                if (
                    info.is_dir()
                    or name.suffix != ".ipynb"
                    or {"__MACOSX", ".ipynb_checkpoints"} & set(name.parts)
                ):
                    continue
                total += info.file_size
                if info.file_size > ZIP_LIMITS[0] or total > ZIP_LIMITS[1]:
                    continue
                target = dest / str(i) / student_dir(name.name)
                target.parent.mkdir(parents=True)
                try:
                    data = z.read(info)
                except Exception:  # corrupt data: zlib.error, EOFError, lzma.LZMAError, ...
                    data = b""  # graded as an invalid notebook
                target.write_bytes(data)
                out.append((info.filename, target))
    except Exception:  # not a zip, or one whose directory cannot be read (whatever the error)
        target = dest / "unreadable" / f"{path.stem}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("")  # graded as an invalid notebook
        out.append((path.name, target))
    return out


def _guess(notebook: str) -> str:
    """The assignment that has an exercise notebook of this name."""
    matches = [p.parent.name for p in (ROOT / "solutions").glob(f"*/{notebook}")]
    return matches[0] if len(matches) == 1 else "unknown"


# -- templates: one generated gradebook per exercise notebook ---------------------------------
def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:20]


def source_path(assignment: str, notebook: str) -> Path:
    return ROOT / "solutions" / assignment / notebook


GRADING_CONFIG = """\
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties, CheckCellMetadata, IgnorePattern, LimitOutput, SaveAutoGrades,
)

from coursekit.grading.harness import GradedExecute

c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "rust-for-pytorch"
c.Autograde.autograde_preprocessors = [
    GradedExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
    AssignLatePenalties, CheckCellMetadata,
]
c.Execute.timeout = {cell_timeout}
c.GradedExecute.notebook_timeout = {notebook_timeout}
c.Execute.startup_timeout = 180
c.Execute.interrupt_on_timeout = True
c.HTMLExporter.sanitize_html = True  # feedback pages: no student HTML or script runs there
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 100
c.Execute.iopub_timeout = 30
c.Execute.raise_on_iopub_timeout = False  # a flood of output must not stop the grading
"""


class Templates:
    """nbgrader's gradebook for each exercise notebook, generated once per batch; with
    `cache`, kept there across runs (`coursekit check`), under a key of what it is made from."""

    def __init__(self, workdir: Path, cache: Path | None = None):
        self.workdir = workdir
        self.cache = cache
        self.lock = threading.Lock()
        self.built: dict[tuple[str, str], Path] = {}

    def get(self, assignment: str, notebook: str) -> Path:
        with self.lock:
            if (assignment, notebook) not in self.built:
                self.built[assignment, notebook] = self._build(assignment, notebook)
            return self.built[assignment, notebook]

    def _build(self, assignment: str, notebook: str) -> Path:
        kept = None
        if self.cache is not None:
            made_of = hashlib.sha256()
            for part in (source_path(assignment, notebook), ROOT / "nbgrader_config.py"):
                made_of.update(part.read_bytes())
            made_of.update(grader_version().encode())
            kept = self.cache / f"{assignment}-{Path(notebook).stem}-{made_of.hexdigest()[:16]}"
            if (kept / "gradebook.db").is_file():
                return kept
        d = self._generate(assignment, notebook)
        if kept is not None:
            tmp = kept.with_name(f"{kept.name}.{os.getpid()}")
            try:
                shutil.copytree(d, tmp)
                os.rename(tmp, kept)  # whole or not at all
            except OSError:  # another check made it first (or the disk is full): use ours
                shutil.rmtree(tmp, ignore_errors=True)
            if (kept / "gradebook.db").is_file():
                return kept
        return d

    def _generate(self, assignment: str, notebook: str) -> Path:
        d = self.workdir / "templates" / assignment / Path(notebook).stem
        shutil.rmtree(d, ignore_errors=True)
        (d / "solutions" / assignment).mkdir(parents=True)
        shutil.copy(source_path(assignment, notebook), d / "solutions" / assignment / notebook)
        shutil.copy(ROOT / "nbgrader_config.py", d / "nbgrader_config.py")
        result = run_nbgrader(d, ["generate_assignment", assignment, "--force"], {}, timeout=300)
        if result.returncode:
            raise RuntimeError(f"could not generate {assignment}/{notebook}: {result.stdout[-2000:]}")
        return d


def run_nbgrader(course: Path, args: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`nbgrader ARGS` in `course`, its output (stdout and stderr) in the result's stdout.

    Each call is its own process in its own session (killed with everything it started at
    `timeout`), forked from a server that imported nbgrader and the harness once, which
    saves the 2 s of imports a fresh `nbgrader` pays twice per job; no job's state reaches
    another, since each is forked from the same freshly imported state. Where that cannot be
    done safely, the `nbgrader` command runs instead: in a process that may not have children
    of its own (a Dask worker), and when this program is a script that each fork would import
    again (multiprocessing runs a `__main__` module's top level in its children unless it was
    started with `python -m`)."""
    bin_dir = Path(sys.executable).parent
    full_env = {**os.environ, **env, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    if not nbgrader_server.forkable():
        proc = subprocess.Popen(
            [str(bin_dir / "nbgrader"), *args],
            cwd=course,
            env=full_env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return subprocess.CompletedProcess(
                proc.args, -9, (out or "") + f"\n[timed out after {timeout} s]", ""
            )
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")
    log = course / f".nbgrader-{uuid.uuid4().hex[:8]}.log"
    run = (str(course), args, full_env, str(log))
    proc = nbgrader_server.context().Process(target=_nbgrader_child, args=run)
    proc.start()
    proc.join(timeout)
    timed_out = proc.exitcode is None
    if timed_out:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the child's session: nbgrader and its kernel
        proc.kill()
        proc.join()
    try:
        out = log.read_text(errors="replace")
        log.unlink()
    except OSError:
        out = ""
    if timed_out:
        out += f"\n[timed out after {timeout} s]"
    return subprocess.CompletedProcess(["nbgrader", *args], -9 if timed_out else proc.exitcode, out, "")


def _nbgrader_child(course: str, args: list[str], env: dict, log: str) -> None:
    """In the forked process: what the `nbgrader` command does, in `course`, output to `log`."""
    os.setsid()
    os.chdir(course)
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = ["nbgrader", *args]
    from nbgrader.apps.nbgraderapp import NbGraderApp

    NbGraderApp.launch_instance(argv=args)  # its exit status leaves as SystemExit


# -- one job ---------------------------------------------------------------------------------
def default_limits() -> sandbox.Limits:
    """The sandbox's limits; COURSEKIT_MEMORY_LIMIT_MB and COURSEKIT_DISK_LIMIT_MB change two."""
    limits = sandbox.Limits()
    limits.memory_bytes = int(os.environ.get("COURSEKIT_MEMORY_LIMIT_MB", limits.memory_bytes >> 20)) << 20
    limits.disk_bytes = int(os.environ.get("COURSEKIT_DISK_LIMIT_MB", limits.disk_bytes >> 20)) << 20
    return limits


@dataclass
class Settings:
    """Everything besides the submission and the exercise that a grade depends on."""

    cell_timeout: int = CELL_TIMEOUT_S
    notebook_timeout: int = NOTEBOOK_TIMEOUT_S
    limits: sandbox.Limits = field(default_factory=default_limits)
    sandboxed: bool = True
    show_hidden_tests: bool = False


@functools.cache
def grader_version() -> str:
    """A hash of the kit's code and pins: a new grader regrades everything."""
    files = sorted(
        p for p in pins.PACKAGE.rglob("*") if p.suffix in (".py", ".rs", ".toml") and "target" not in p.parts
    )
    return _digest(*(p.read_bytes() for p in files))


def input_key(sub: Submission, settings: Settings) -> str:
    def read(path: Path) -> bytes:
        if not path.is_file():
            return b""
        st = path.stat()  # a notebook too large to read is known by its size and time
        too_large = st.st_size > submission.MAX_BYTES
        return f"{st.st_size} {st.st_mtime_ns}".encode() if too_large else path.read_bytes()

    return _digest(
        read(sub.path),
        read(source_path(sub.assignment, sub.notebook)),  # solutions and hidden tests
        read(ROOT / "exercises" / sub.assignment / sub.notebook),  # the release
        grader_version().encode(),
        json.dumps(asdict(settings), sort_keys=True).encode(),
        (sub.problem or "").encode(),
    )


def _messages(nb: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> the error a test cell ended with in the autograded notebook."""
    found = {}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        for out in cell.get("outputs", []):
            if gid and out.get("output_type") == "error":
                evalue = out.get("evalue") or (
                    f"no result within {CELL_TIMEOUT_S} s" if "Timeout" in str(out.get("ename")) else ""
                )
                found[gid] = f"{out.get('ename')}: {evalue}".strip()
    return found


def kernel_unavailable(nb: nbformat.NotebookNode) -> str | None:
    """Why evcxr could not start in this graded run, if it could not: a fault of the grader's
    set-up (a stale build directory, a missing binary), which no submission's score may hide.
    Known by the error's name, which only the kernel and the harness give: a submission
    chooses the words of its panics and errors, never their names."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") == UNAVAILABLE_NAME:
                return _tail(ANSI.sub("", str(out.get("evalue", ""))), 300)
    return None


def _answer_errors(nb: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> the first error of each answer cell (a compile error with rustc's report,
    which names the line of the cell)."""
    found = {}
    for cell in nb.cells:
        nbg = harness.nbgrader_meta(cell)
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if nbg.get("solution") and errors:
            error = errors[0]
            report = error.get("traceback", []) if error.get("ename") == "CompileError" else []
            found[nbg["grade_id"]] = "\n".join(
                [f"{error.get('ename')}: {error.get('evalue')}"] + [ANSI.sub("", line) for line in report]
            )
    return found


def python_cells(released: nbformat.NotebookNode) -> str:
    """Hashes of the release's %%python cells: the only Python a graded kernel runs."""
    bodies = [split_python(c.source) for c in released.cells if c.cell_type == "code"]
    return ",".join(hashlib.sha256(b.encode()).hexdigest() for b in bodies if b is not None)


def kernel_env(released: nbformat.NotebookNode) -> dict[str, str]:
    """What a graded run's kernel is told: it is graded, and which %%python cells it may run."""
    return {"COURSEKIT_GRADED": "1", "COURSEKIT_PYTHON_CELLS": python_cells(released)}


def run_job(
    sub: Submission,
    templates: Templates,
    workdir: Path,
    settings: Settings | None = None,
    feedback_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    kernel_ahead: Path | None = None,
    stop_when: Callable[[], str | None] | None = None,
) -> Record:
    """Grade one submitted notebook; never raises for a bad submission. `progress` is told
    what the harness reports while the notebook runs (the kernel started, each test's verdict).
    `kernel_ahead`: the handoff of a KernelAhead to run in first (the learner's own check only)."""
    settings = settings or Settings()
    if kernel_ahead is not None and settings.sandboxed:
        raise ValueError("a sandboxed run starts its own kernels")
    started = time.monotonic()
    nbgrader_server.start()
    record = Record(sub.student, sub.assignment, sub.notebook, input_key(sub, settings))
    if not source_path(sub.assignment, sub.notebook).is_file():
        record.error = f"{sub.assignment}/{sub.notebook} is not an exercise of this course"
        record.status = "submission error"
        return record
    try:
        if sub.problem:
            raise submission.InvalidSubmission(sub.problem)
        submitted = submission.read(sub.path)
    except submission.InvalidSubmission as exc:
        record.error, record.status = str(exc), "submission error"
        _zero_tasks(record)
        if feedback_dir is not None:
            _feedback(record, None, sub, feedback_dir, settings)
        return record
    template = templates.get(sub.assignment, sub.notebook)
    released = nbformat.read(template / "exercises" / sub.assignment / sub.notebook, as_version=4)
    repaired, record.notes = submission.repair(submitted, released)
    record.flags = submission.review_flags(submitted, released)

    job = sandbox.Job.create(
        workdir / f"job-{uuid.uuid4().hex[:12]}", slots.pool_dir() / f"slot-{GRADE_SLOT}", settings.limits
    )
    course = job.root / "course"
    stack = contextlib.ExitStack()  # the template, held while the job uses it
    try:
        (course / "submitted" / NBGRADER_STUDENT / sub.assignment).mkdir(parents=True)
        shutil.copy(template / "gradebook.db", course / "gradebook.db")
        config = GRADING_CONFIG.format(
            cell_timeout=settings.cell_timeout, notebook_timeout=settings.notebook_timeout
        )
        events = job.root / "events.json"  # what the harness saw happen
        env = {**kernel_env(released), "COURSEKIT_EVENTS": str(events)}
        if kernel_ahead is not None:
            env[harness.KERNEL_AHEAD] = str(kernel_ahead)
        if settings.sandboxed:
            config += 'c.Execute.kernel_manager_class = "coursekit.grading.sandbox.SandboxedKernelManager"\n'
            stack.enter_context(template_in_use())
            sandbox.clone_template(job)
            env["COURSEKIT_JOB"] = str(job.root)
        (course / "nbgrader_config.py").write_text(config)
        nbformat.write(repaired, course / "submitted" / NBGRADER_STUDENT / sub.assignment / sub.notebook)
        args = ["autograde", sub.assignment, "--student", NBGRADER_STUDENT, "--force"]
        record.phases["preparing the job"] = round(time.monotonic() - started, 2)
        if progress is not None:
            env["COURSEKIT_PROGRESS"] = str(job.root / "progress.txt")
        result = _watched(course, args, env, job, settings, progress, stop_when)
        autograde_s = time.monotonic() - started - record.phases["preparing the job"]
        _read_scores(record, course, sub)
        said = [line for line in result.stdout.splitlines() if line.startswith("bwrap: ")]
        if record.status == "grader error" and said:  # why the sandbox did not start
            record.error += f" ({said[-1][:300]})"
        if not record.tasks:
            record.error = "the notebook could not be run: " + _tail(result.stdout)
            record.status = "grader error"
            _zero_tasks(record)
        elif result.returncode:
            record.error = "grading stopped early: " + _tail(result.stdout)
        record.events = sandbox.limit_events(job) + [
            line for line in result.stdout.splitlines() if line.startswith("[stopped:")
        ]
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            report = json.loads(events.read_text())
            record.events += report["events"]
            in_kernel = {f"autograde: {k}": v for k, v in report["seconds"].items()}
            rest = round(autograde_s - sum(in_kernel.values()), 2)
            record.phases.update({"autograde: nbgrader itself": rest, **in_kernel})
        feedback_started = time.monotonic()
        if feedback_dir is not None:
            _feedback(record, course, sub, feedback_dir, settings, released)
        record.phases["feedback"] = round(time.monotonic() - feedback_started, 2)
    finally:
        removing = time.monotonic()
        stack.close()
        job.remove()
        record.phases["removing the job"] = round(time.monotonic() - removing, 2)
    if record.status == "ok" and (record.notes or record.error):
        record.status = "submission error" if record.error else "repaired"
    record.seconds = round(time.monotonic() - started, 1)
    return record


def _watched(
    course: Path,
    args: list[str],
    env: dict,
    job: sandbox.Job,
    settings: Settings,
    progress=None,
    stop_when=None,
):
    """Run nbgrader; stop the job when what it can write outgrows the disk limit, or when
    `stop_when()` gives a reason; pass on the harness's progress lines."""
    stop = threading.Event()
    killed: list[str] = []
    told = 0

    def tell():
        nonlocal told
        with contextlib.suppress(OSError):
            text = Path(env["COURSEKIT_PROGRESS"]).read_text()
            lines = text[: text.rfind("\n") + 1].splitlines()  # whole lines only
            for line in lines[told:]:
                progress(line)
            told = len(lines)

    def watch():
        ticks = 0
        while not stop.wait(0.1):  # progress lines at once; the limits twice a second
            if progress is not None:
                tell()
            ticks += 1
            if ticks % 5:
                continue
            if sum(slots.size(job.root / d) for d in ("run", "slot")) > settings.limits.disk_bytes:
                killed.append(f"the job wrote more than {settings.limits.disk_bytes >> 20} MiB to disk")
            elif stop_when is not None and (reason := stop_when()):
                killed.append(reason)
            if killed:
                sandbox.remove_cgroups(job.root.name)
                for p in _pids_under(course):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(p, signal.SIGKILL)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # the harness stops at notebook_timeout and saves what it graded; this is the backstop
        result = run_nbgrader(course, args, env, timeout=settings.notebook_timeout + 300)
    finally:
        stop.set()
        watcher.join()
    if progress is not None:
        tell()
    if killed:
        result.stdout += f"\n[stopped: {killed[0]}]"
    return result


def _pids_under(course: Path) -> list[int]:
    """Processes whose working directory is inside the job (nbgrader and its kernel launcher)."""
    import psutil

    pids = []
    for p in psutil.process_iter(["cwd"]):
        cwd = p.info.get("cwd") or ""
        if cwd.startswith(str(course)):
            pids.append(p.pid)
    return pids


def _tail(text: str, n: int = 600) -> str:
    lines = [line for line in text.splitlines() if line.strip() and "Kernel is running over TCP" not in line]
    return "\n".join(lines)[-n:]


def _zero_tasks(record: Record) -> None:
    """Every task at 0 of its real points (from the exercise, never from the submission)."""
    src = nbformat.read(source_path(record.assignment, record.notebook), as_version=4)
    for cell in src.cells:
        if harness.is_test(cell):
            nbg = harness.nbgrader_meta(cell)
            record.tasks[nbg["grade_id"]] = [0.0, float(nbg.get("points", 0)), record.error]
    record.score = 0.0
    record.max_score = sum(t[1] for t in record.tasks.values())


def _read_scores(record: Record, course: Path, sub: Submission) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    stem = Path(sub.notebook).stem
    autograded = course / "autograded" / NBGRADER_STUDENT / sub.assignment / sub.notebook
    graded = nbformat.read(autograded, as_version=4) if autograded.is_file() else None
    messages = _messages(graded) if graded else {}
    record.answers = _answer_errors(graded) if graded else {}
    if graded and (why := kernel_unavailable(graded)):  # not the submission's doing: say so
        record.error, record.status = f"the grader could not start Rust: {why}", "grader error"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        try:
            nb = gb.find_submission_notebook(stem, sub.assignment, NBGRADER_STUDENT)
        except MissingEntry:
            return
        for g in nb.grades:
            if g.max_score:
                record.tasks[g.name] = [float(g.score or 0), float(g.max_score), messages.get(g.name)]
    record.score = sum(t[0] for t in record.tasks.values())
    record.max_score = sum(t[1] for t in record.tasks.values())


def _hide_tests(autograded: Path, released: nbformat.NotebookNode) -> None:
    """Test cells as the student saw them (no hidden tests), and their errors without the
    source excerpts a compiler error quotes. The code a test cell runs was on disk (evcxr's
    build directory) while the student's code ran: a hidden test's line that an output
    prints is blotted out too (as printed: an encoded copy gets through)."""
    visible = {
        harness.nbgrader_meta(c).get("grade_id"): c.source for c in released.cells if harness.is_test(c)
    }
    nb = nbformat.read(autograded, as_version=4)
    hidden = set()
    for cell in nb.cells:
        if harness.is_test(cell):
            shown = set(visible.get(harness.nbgrader_meta(cell).get("grade_id"), "").splitlines())
            hidden |= {line.strip() for line in cell.source.splitlines() if line not in shown}
    hidden = sorted((line for line in hidden if len(line) >= 12), key=len, reverse=True)

    def blot(text):
        if not isinstance(text, str):
            return text
        for line in hidden:
            text = text.replace(line, "[a line of a hidden test]")
        return text

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for key in ("text", "evalue"):
                if key in out:
                    out[key] = blot(out[key])
            if "traceback" in out:
                out["traceback"] = [blot(line) for line in out["traceback"]]
            if isinstance(out.get("data"), dict):
                out["data"] = {mime: blot(value) for mime, value in out["data"].items()}
        if harness.is_test(cell):
            cell.source = visible.get(harness.nbgrader_meta(cell).get("grade_id"), "")
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename')}: {out.get('evalue')}"]
    nbformat.write(nb, autograded)


def feedback_path(feedback_dir: Path, sub: Submission) -> Path:
    return feedback_dir / student_dir(sub.student) / sub.assignment / (Path(sub.notebook).stem + ".html")


def _feedback(record, course, sub, feedback_dir, settings, released=None) -> None:
    dest = feedback_path(feedback_dir, sub)
    dest.parent.mkdir(parents=True, exist_ok=True)
    html = ""
    if course is not None and record.tasks and record.status != "grader error":
        autograded = course / "autograded" / NBGRADER_STUDENT / sub.assignment / sub.notebook
        if autograded.is_file() and released is not None and not settings.show_hidden_tests:
            _hide_tests(autograded, released)
        args = ["generate_feedback", sub.assignment, "--student", NBGRADER_STUDENT, "--force"]
        result = run_nbgrader(course, args, {}, timeout=300)
        made = course / "feedback" / NBGRADER_STUDENT / sub.assignment / (Path(sub.notebook).stem + ".html")
        if result.returncode == 0 and made.is_file():
            html = made.read_text()
    notes = "".join(f"<li>{_escape(n)}</li>" for n in record.notes + ([record.error] if record.error else []))
    banner = f"<div class='coursekit-notes'><b>Before grading:</b><ul>{notes}</ul></div>" if notes else ""
    if record.events:
        events = "".join(f"<li>{_escape(e)}</li>" for e in record.events)
        banner += f"<div class='coursekit-events'><b>While grading:</b><ul>{events}</ul></div>"
    if record.flags:
        flags = "".join(f"<li>{_escape(f)}</li>" for f in record.flags)
        banner += f"<div class='coursekit-flags'><b>For your instructor's review:</b><ul>{flags}</ul></div>"
    if record.answers:  # the cause comes before the tests' knock-on failures
        own = "".join(f"<li>{_escape(a)}:<pre>{_escape(e)}</pre></li>" for a, e in record.answers.items())
        title = "<b>Your code that did not compile or run:</b>"
        banner += f"<div class='coursekit-answers'>{title}<ul>{own}</ul></div>"
    failed = [
        f"<li>{_escape(t)}: {_escape(m or 'failed')}</li>" for t, (s, mx, m) in record.tasks.items() if s < mx
    ]
    if failed:
        banner += f"<div class='coursekit-failed'><b>Tests that failed:</b><ul>{''.join(failed)}</ul></div>"
    if not html:
        title = _escape(sub.notebook)
        html = f"<html><body><h1>{title}</h1><p>Score: 0 / {record.max_score:g}</p></body></html>"
    _atomic_write(dest, re.sub(r"<body[^>]*>", lambda m: m.group(0) + banner, html, count=1))


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- the grade store -------------------------------------------------------------------------
def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def record_path(out: Path, student: str, assignment: str, notebook: str) -> Path:
    return out / "results" / student_dir(student) / assignment / (Path(notebook).stem + ".json")


def load_records(out: Path) -> list[Record]:
    records = []
    for p in sorted((out / "results").glob("*/*/*.json")):
        try:
            records.append(Record(**json.loads(p.read_text())))
        except (ValueError, TypeError):
            continue  # a record is only ever replaced whole; skip anything else
    return records


def write_csv(out: Path) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["student", "assignment", "notebook", "score", "max_score", "status", "flags", "feedback"])
    for r in load_records(out):
        status = r.status + (": " + r.error.splitlines()[0] if r.error else "")
        feedback = (
            Path("feedback") / student_dir(r.student) / r.assignment / (Path(r.notebook).stem + ".html")
        )
        row = [r.student, r.assignment, Path(r.notebook).stem, f"{r.score:g}", f"{r.max_score:g}", status]
        w.writerow([*row, "; ".join(r.flags), str(feedback)])
    path = out / "grades.csv"
    _atomic_write(path, buf.getvalue())
    return path


# -- the batch -------------------------------------------------------------------------------
class _Local:
    """Jobs in threads of this process (each job's kernel is its own process)."""

    def __init__(self, jobs: int, work: Path, out: Path):
        self.pool, self.work, self.templates = ThreadPoolExecutor(jobs), work, Templates(work)
        self.feedback = out / "feedback"

    def submit(self, sub: Submission, settings: Settings):
        return self.pool.submit(run_job, sub, self.templates, self.work, settings, self.feedback)

    as_completed = staticmethod(as_completed)

    @staticmethod
    def result(future, sub: Submission, out: Path) -> Record:
        return future.result()

    def close(self) -> None:
        self.pool.shutdown()


@contextlib.contextmanager
def template_in_use(change: bool = False):
    """Hold the sandboxes' build directory (the template): a job shares it while it runs (it
    copies the small files and mounts the big ones, again at each kernel restart); a change
    has it alone, once the running jobs are done. The gate keeps new jobs out while a change
    waits, so that a steady stream of jobs cannot hold it off."""
    pool = slots.ensure_pool()
    fds = [slots.lock_file(pool / "grade-template.gate", wait=True)]
    fds.append(slots.lock_file(pool / "grade-template.users", wait=True, shared=not change))
    if not change:
        os.close(fds.pop(0))
    try:
        yield
    finally:
        for fd in fds:
            os.close(fd)


def ensure_template_slot(assignments: set[str]) -> None:
    """The sandboxes' build directory: warm for every framework these assignments use, with
    the course's prelude crate built from its sources as they are now (the sandboxes cannot
    rebuild what they find compiled there). Changed only when it must be, alone."""
    from ..setup.prewarm import is_warm, mark_prelude_built, prelude_built, run_cells, warm

    used = set()
    for a in assignments:
        for nb in (ROOT / "solutions" / a).glob("*.ipynb"):
            deps = {
                line
                for cell in nbformat.read(nb, as_version=4).cells
                if cell.cell_type == "code"
                for line in cell.source.splitlines()
                if line.startswith(":dep")
            }
            used |= {fw for fw in pins.frameworks() if set(pins.dep_lines(fw)) <= deps}

    def cold() -> list[str]:
        return [fw for fw in sorted(used) if not is_warm(GRADE_SLOT, fw)]

    if not cold() and prelude_built(GRADE_SLOT):
        return
    with template_in_use(change=True):
        todo = cold()
        for fw in todo:  # its kernel builds the prelude too
            print(f"[grade] compiling {fw} for the sandboxes (once)", flush=True)
            warm(GRADE_SLOT, fw)
        if not todo and not prelude_built(GRADE_SLOT):  # after a fresh clone or an edit of it
            run_cells(["()"], slot=GRADE_SLOT)
        mark_prelude_built(GRADE_SLOT)


def preflight(settings: Settings) -> list[str]:
    """Warnings about limits that cannot hold on this machine (printed before grading)."""
    if not settings.sandboxed:
        return ["--no-sandbox: submissions run with your own rights; use it for trusted notebooks only"]
    if sys.platform != "linux":
        raise InputError(
            f"sandboxed grading needs Linux (bubblewrap, namespaces, cgroups), not {sys.platform}: "
            "grade on a Linux machine, or only trusted notebooks here with --no-sandbox"
        )
    if not shutil.which("bwrap"):
        raise InputError("bubblewrap (bwrap) is missing: `sudo apt-get install bubblewrap`, or --no-sandbox")
    problem = sandbox.cgroup_problem()
    return [problem] if problem else []


def grade(
    src: Path,
    out: Path,
    jobs: int | None = None,
    settings: Settings | None = None,
    force: bool = False,
    retry_errors: bool = False,
    zip_pattern: str | None = None,
    progress: bool = True,
    cluster: str | None = None,
):
    """Grade every submission under `src` into `out`, in `jobs` parallel jobs here or on the
    workers of the Dask scheduler at `cluster` (coursekit.grading.cluster); return the
    records of this run. One grader at a time writes to `out`: a second one stops at once
    (it would remove the first one's jobs and both would write the same records)."""
    settings = settings or Settings()
    for warning in preflight(settings) if cluster is None else []:
        print(f"[grade] WARNING: {warning}", file=sys.stderr, flush=True)
    src, out = src.resolve(), out.resolve()  # jobs run in other working directories
    out.mkdir(parents=True, exist_ok=True)
    held = slots.lock_file(out / ".grading.lock", wait=False)
    if held is None:
        raise InputError(
            f"another `coursekit grade` is writing to {out}: let it finish (a re-run afterwards "
            "grades only what changed), or grade into another --out"
        )
    try:
        return _grade(src, out, jobs, settings, force, retry_errors, zip_pattern, progress, cluster)
    finally:
        os.close(held)


def _grade(src, out, jobs, settings, force, retry_errors, zip_pattern, progress, cluster):
    from tqdm import tqdm

    work = out / ".work"
    for job in work.glob("job-*"):  # left by a grader that was killed: its cgroups, its /tmp link
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            sandbox.Job.load(job).remove()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    assignments = sorted(d.name for d in (ROOT / "solutions").iterdir() if d.is_dir())
    subs, ignored = discover(src, work / "unzipped", assignments, zip_pattern or ZIP_PATTERN)
    for path in ignored:
        print(
            f"[grade] WARNING: {path} is not STUDENT/ASSIGNMENT/NOTEBOOK.ipynb nor in a zip: not graded",
            file=sys.stderr,
        )
    todo, done = [], []
    for sub in subs:
        try:
            previous = json.loads(record_path(out, sub.student, sub.assignment, sub.notebook).read_text())
        except (OSError, ValueError):
            previous = None
        stale = previous is None or previous.get("key") != input_key(sub, settings)
        retry = retry_errors and previous is not None and previous.get("status") == "grader error"
        (todo if force or stale or retry else done).append(sub)
    if cluster is None:
        if settings.sandboxed and todo:
            ensure_template_slot({s.assignment for s in todo if s.assignment in assignments})
        runner = _Local(jobs or os.cpu_count() or 1, work, out)
    else:  # each worker checks its own sandbox and warms its own build directory
        from .cluster import Cluster

        runner = Cluster(cluster)
    records = []
    bar = tqdm(
        total=len(todo), unit="notebook", disable=not progress, desc=f"grading ({len(done)} unchanged)"
    )
    try:
        futures = {runner.submit(s, settings): s for s in todo}
        for fut in runner.as_completed(futures):
            sub = futures[fut]
            try:
                record = runner.result(fut, sub, out)
            except Exception as exc:  # a fault of the grader itself: record it, go on
                record = Record(sub.student, sub.assignment, sub.notebook, "", error=f"grader error: {exc!r}")
                record.status = "grader error"
                with contextlib.suppress(Exception):
                    _zero_tasks(record)
            _atomic_write(
                record_path(out, sub.student, sub.assignment, sub.notebook),
                json.dumps(asdict(record), indent=1),
            )
            records.append(record)
            bar.update()
    finally:
        bar.close()
        runner.close()
    write_csv(out)
    shutil.rmtree(work, ignore_errors=True)
    return records
