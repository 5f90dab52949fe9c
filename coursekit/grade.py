"""`coursekit grade SUBMISSIONS`: autograde a batch of untrusted submissions.

Input: a folder of `STUDENT/ASSIGNMENT/*.ipynb`, and/or zip files (an LMS export: one
`STUDENT.zip` or `STUDENT_anything.zip` per student holding that student's notebooks, or a
zip of `STUDENT/ASSIGNMENT/*.ipynb` folders). Output folder:

    results/STUDENT/ASSIGNMENT/NOTEBOOK.json   one record per graded notebook (the grade store)
    feedback/STUDENT/ASSIGNMENT/NOTEBOOK.html  nbgrader's feedback, plus what was repaired
    grades.csv                                 one row per notebook, rebuilt from results/

Each notebook is graded in its own job — its own scratch nbgrader course holding only that
notebook's gradebook, its kernel in the sandbox (coursekit.sandbox) — in parallel on the
available cores. A record names a hash of its inputs, so a re-run grades only what changed;
records are written atomically, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from . import pins, sandbox, slots, submission
from .pins import ROOT

CELL_TIMEOUT_S = int(os.environ.get("COURSEKIT_CELL_TIMEOUT", "120"))
NOTEBOOK_TIMEOUT_S = int(os.environ.get("COURSEKIT_NOTEBOOK_TIMEOUT", "900"))
DISK_LIMIT_BYTES = 2 * 2**30
GRADE_SLOT = "grade"


@dataclass
class Submission:
    student: str
    assignment: str
    notebook: str  # file name
    path: Path


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
    error: str | None = None  # why the notebook could not be graded (all tasks 0)
    seconds: float = 0.0


# -- finding submissions -------------------------------------------------------------------
def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._") or "unnamed"


def discover(src: Path, unpack_to: Path, assignments: list[str]) -> list[Submission]:
    """Every submitted notebook under `src` (zip files unpacked into `unpack_to`)."""
    found = []
    for z in sorted(src.rglob("*.zip")):
        student = _safe_name(z.stem.split("_")[0])
        dest = unpack_to / z.stem
        _unzip(z, dest)
        inner = [p for p in dest.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts]
        for p in inner:
            parts = p.relative_to(dest).parts
            if len(parts) >= 3 and parts[-2] in assignments:  # STUDENT/ASSIGNMENT/x.ipynb
                found.append(Submission(_safe_name(parts[-3]), parts[-2], p.name, p))
            else:
                assignment = parts[-2] if len(parts) >= 2 and parts[-2] in assignments else _guess(p.name)
                found.append(Submission(student, assignment, p.name, p))
    for p in sorted(src.glob("*/*/*.ipynb")):
        found.append(Submission(_safe_name(p.parent.parent.name), p.parent.name, p.name, p))
    return found


def _unzip(path: Path, dest: Path) -> None:
    """Extract notebooks only, never outside `dest` (zip-slip), at most 50 MB each."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                name = Path(info.filename)
                if info.is_dir() or name.suffix != ".ipynb" or name.is_absolute() or ".." in name.parts:
                    continue
                if info.file_size > 50 * 2**20:
                    continue
                target = dest / Path(*[_safe_name(p) for p in name.parts])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(info))
    except zipfile.BadZipFile:
        (dest / "unreadable.zip.ipynb").write_text("")  # graded as an invalid notebook


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
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "rust-for-pytorch"
c.Execute.timeout = {cell_timeout}
c.Execute.startup_timeout = 180
c.Execute.interrupt_on_timeout = True
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 100
c.Execute.iopub_timeout = 30
c.Execute.raise_on_iopub_timeout = False  # a flood of output must not stop the grading
"""


class Templates:
    """nbgrader's gradebook for each exercise notebook, generated once per batch."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.lock = threading.Lock()
        self.built: dict[tuple[str, str], Path] = {}

    def get(self, assignment: str, notebook: str) -> Path:
        with self.lock:
            if (assignment, notebook) not in self.built:
                self.built[assignment, notebook] = self._build(assignment, notebook)
            return self.built[assignment, notebook]

    def _build(self, assignment: str, notebook: str) -> Path:
        d = self.workdir / "templates" / assignment / Path(notebook).stem
        shutil.rmtree(d, ignore_errors=True)
        (d / "solutions" / assignment).mkdir(parents=True)
        shutil.copy(source_path(assignment, notebook), d / "solutions" / assignment / notebook)
        shutil.copy(ROOT / "nbgrader_config.py", d / "nbgrader_config.py")
        result = _nbgrader(d, ["generate_assignment", assignment, "--force"], {}, timeout=300)
        if result.returncode:
            raise RuntimeError(f"could not generate {assignment}/{notebook}: {result.stdout[-2000:]}")
        return d


def _nbgrader(course: Path, args: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    full_env = {**os.environ, **env, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
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


# -- one job ---------------------------------------------------------------------------------
def input_key(sub: Submission) -> str:
    src = source_path(sub.assignment, sub.notebook)
    kit = (pins.PACKAGE / "pins.toml").read_bytes()
    return _digest(sub.path.read_bytes(), src.read_bytes() if src.is_file() else b"", kit)


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


def run_job(
    sub: Submission,
    templates: Templates,
    workdir: Path,
    sandboxed: bool = True,
    feedback_dir: Path | None = None,
    limits: sandbox.Limits | None = None,
) -> Record:
    """Grade one submitted notebook; never raises for a bad submission."""
    started = time.monotonic()
    record = Record(sub.student, sub.assignment, sub.notebook, input_key(sub))
    if not source_path(sub.assignment, sub.notebook).is_file():
        record.error = f"{sub.assignment}/{sub.notebook} is not an exercise of this course"
        return record
    try:
        submitted = submission.read(sub.path)
    except submission.InvalidSubmission as exc:
        record.error = str(exc)
        _zero_tasks(record)
        if feedback_dir is not None:
            _feedback(record, None, sub, feedback_dir)
        return record
    template = templates.get(sub.assignment, sub.notebook)
    released = nbformat.read(template / "exercises" / sub.assignment / sub.notebook, as_version=4)
    repaired, record.notes = submission.repair(submitted, released)

    job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=workdir))
    runtime = Path(tempfile.mkdtemp(prefix="ck-"))
    job = sandbox.Job(job_dir, runtime, slots.pool_dir() / f"slot-{GRADE_SLOT}", limits or sandbox.Limits())
    course = job_dir / "course"
    try:
        (course / "submitted" / sub.student / sub.assignment).mkdir(parents=True)
        shutil.copy(template / "gradebook.db", course / "gradebook.db")
        config = GRADING_CONFIG.format(cell_timeout=CELL_TIMEOUT_S)
        env = {}
        if sandboxed:
            config += 'c.Execute.kernel_manager_class = "coursekit.sandbox.SandboxedKernelManager"\n'
            sandbox.clone_template(job)
            env = {
                "COURSEKIT_JOB": str(job_dir),
                "COURSEKIT_TEMPLATE": str(job.slot_path),
                "COURSEKIT_RUNTIME": str(runtime),
                "JUPYTER_RUNTIME_DIR": str(runtime),
            }
        (course / "nbgrader_config.py").write_text(config)
        nbformat.write(repaired, course / "submitted" / sub.student / sub.assignment / sub.notebook)
        args = ["autograde", sub.assignment, "--student", sub.student, "--force"]
        result = _watched(course, args, env, job)
        _read_scores(record, course, sub)
        if not record.tasks:
            record.error = "the notebook could not be run: " + _tail(result.stdout)
            _zero_tasks(record)
        elif result.returncode:
            record.error = "grading stopped early: " + _tail(result.stdout)
        if feedback_dir is not None:
            _feedback(record, course, sub, feedback_dir)
    finally:
        sandbox.remove_cgroups(job_dir.name)
        shutil.rmtree(job_dir, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
    record.seconds = round(time.monotonic() - started, 1)
    return record


def _watched(course: Path, args: list[str], env: dict, job: sandbox.Job) -> subprocess.CompletedProcess:
    """Run nbgrader; kill it when the job's files outgrow DISK_LIMIT_BYTES."""
    stop = threading.Event()
    killed = []

    def watch():
        while not stop.wait(1.0):
            if _new_bytes(job.root) > DISK_LIMIT_BYTES:
                killed.append(True)
                sandbox.remove_cgroups(job.root.name)
                for p in _pids_under(course):
                    with _suppress():
                        os.kill(p, signal.SIGKILL)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = _nbgrader(course, args, env, timeout=NOTEBOOK_TIMEOUT_S)
    finally:
        stop.set()
        watcher.join()
    if killed:
        result.stdout += f"\n[stopped: the job wrote more than {DISK_LIMIT_BYTES >> 30} GiB]"
    return result


def _suppress():
    import contextlib

    return contextlib.suppress(ProcessLookupError, PermissionError)


def _pids_under(course: Path) -> list[int]:
    """Processes whose working directory is inside the job (nbgrader and its kernel launcher)."""
    import psutil

    pids = []
    for p in psutil.process_iter(["cwd"]):
        cwd = p.info.get("cwd") or ""
        if cwd.startswith(str(course)):
            pids.append(p.pid)
    return pids


def _new_bytes(root: Path) -> int:
    """Bytes of files written by the job (hard links to the template do not count)."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue
            if st.st_nlink == 1:
                total += st.st_blocks * 512
    return total


def _tail(text: str, n: int = 600) -> str:
    lines = [line for line in text.splitlines() if line.strip() and "Kernel is running over TCP" not in line]
    return "\n".join(lines)[-n:]


def _zero_tasks(record: Record) -> None:
    src = nbformat.read(source_path(record.assignment, record.notebook), as_version=4)
    for cell in src.cells:
        nbg = cell.metadata.get("nbgrader", {})
        if nbg.get("grade") and not nbg.get("solution"):
            record.tasks[nbg["grade_id"]] = [0.0, float(nbg.get("points", 0)), record.error]
    record.max_score = sum(t[1] for t in record.tasks.values())


def _read_scores(record: Record, course: Path, sub: Submission) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    stem = Path(sub.notebook).stem
    autograded = course / "autograded" / sub.student / sub.assignment / sub.notebook
    messages = _messages(nbformat.read(autograded, as_version=4)) if autograded.is_file() else {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        try:
            nb = gb.find_submission_notebook(stem, sub.assignment, sub.student)
        except MissingEntry:
            return
        for g in nb.grades:
            if g.max_score:
                record.tasks[g.name] = [float(g.score or 0), float(g.max_score), messages.get(g.name)]
    record.score = sum(t[0] for t in record.tasks.values())
    record.max_score = sum(t[1] for t in record.tasks.values())


def _feedback(record: Record, course: Path | None, sub: Submission, feedback_dir: Path) -> None:
    dest = feedback_dir / sub.student / sub.assignment / (Path(sub.notebook).stem + ".html")
    dest.parent.mkdir(parents=True, exist_ok=True)
    html = ""
    if course is not None and record.tasks and not record.error:
        result = _nbgrader(
            course,
            ["generate_feedback", sub.assignment, "--student", sub.student, "--force"],
            {},
            timeout=300,
        )
        made = course / "feedback" / sub.student / sub.assignment / (Path(sub.notebook).stem + ".html")
        if result.returncode == 0 and made.is_file():
            html = made.read_text()
    notes = "".join(f"<li>{_escape(n)}</li>" for n in record.notes + ([record.error] if record.error else []))
    banner = f"<div class='coursekit-notes'><b>Before grading:</b><ul>{notes}</ul></div>" if notes else ""
    if not html:
        title = _escape(sub.notebook)
        html = f"<html><body><h1>{title}</h1><p>Score: 0 / {record.max_score:g}</p></body></html>"
    _atomic_write(dest, html.replace("<body>", "<body>" + banner, 1))


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- the grade store -------------------------------------------------------------------------
def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def record_path(out: Path, student: str, assignment: str, notebook: str) -> Path:
    return out / "results" / student / assignment / (Path(notebook).stem + ".json")


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
    w.writerow(["student", "assignment", "notebook", "score", "max_score", "status"])
    for r in load_records(out):
        status = "error: " + r.error.splitlines()[0] if r.error else ("repaired" if r.notes else "ok")
        w.writerow(
            [r.student, r.assignment, Path(r.notebook).stem, f"{r.score:g}", f"{r.max_score:g}", status]
        )
    path = out / "grades.csv"
    _atomic_write(path, buf.getvalue())
    return path


# -- the batch -------------------------------------------------------------------------------
def ensure_template_slot(assignments: set[str]) -> None:
    """The sandboxes' build directory: warm for every framework these assignments use."""
    from .prewarm import is_warm, warm

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
    for fw in sorted(used):
        if not is_warm(GRADE_SLOT, fw):
            print(f"[grade] compiling {fw} for the sandboxes (once)", flush=True)
            warm(GRADE_SLOT, fw)
    (slots.pool_dir() / f"slot-{GRADE_SLOT}").mkdir(parents=True, exist_ok=True)


def grade(src: Path, out: Path, jobs: int | None = None, sandboxed: bool = True, progress: bool = True):
    """Grade every submission under `src` into `out`; return the records of this run."""
    from tqdm import tqdm

    src, out = src.resolve(), out.resolve()  # jobs run in other working directories
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    assignments = sorted(d.name for d in (ROOT / "solutions").iterdir() if d.is_dir())
    subs = discover(src, work / "unzipped", assignments)
    todo, done = [], []
    for sub in subs:
        path = record_path(out, sub.student, sub.assignment, sub.notebook)
        try:
            if json.loads(path.read_text())["key"] == input_key(sub):
                done.append(sub)
                continue
        except (OSError, ValueError, KeyError):
            pass
        todo.append(sub)
    if sandboxed and todo:
        ensure_template_slot({s.assignment for s in todo if s.assignment in assignments})
    templates = Templates(work)
    records = []
    jobs = jobs or os.cpu_count() or 1
    with (
        ThreadPoolExecutor(jobs) as pool,
        tqdm(
            total=len(todo), unit="notebook", disable=not progress, desc=f"grading ({len(done)} unchanged)"
        ) as bar,
    ):
        futures = {pool.submit(run_job, s, templates, work, sandboxed, out / "feedback"): s for s in todo}
        for fut in as_completed(futures):
            sub = futures[fut]
            try:
                record = fut.result()
            except Exception as exc:  # a fault of the grader itself: record it, go on
                record = Record(sub.student, sub.assignment, sub.notebook, "", error=f"grader error: {exc!r}")
            _atomic_write(
                record_path(out, sub.student, sub.assignment, sub.notebook),
                json.dumps(asdict(record), indent=1),
            )
            records.append(record)
            bar.update()
    write_csv(out)
    shutil.rmtree(work, ignore_errors=True)
    return records
