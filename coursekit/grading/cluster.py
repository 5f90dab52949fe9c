"""`coursekit grade --cluster ADDRESS`: the same sandboxed jobs, run by a Dask cluster's workers.

The scheduler and the workers are Dask's own (`dask scheduler`, `dask worker ADDRESS`); a
worker is any machine where the course is set up (`make setup-tests`, or the image built
from binder/), started from the course's folder. The grader sends each job the submitted
notebook's bytes; a worker grades it in its own sandbox, exactly as `run_job` does locally,
and sends back the record and the feedback page. Only the grader writes the grade store,
so records, resuming and regrading only what changed are those of local mode. A worker
that dies mid-job loses nothing: the scheduler runs the job again on another worker, and a
job's record is written once, when its result arrives. What a dead worker left running
or on disk is removed by the next worker process of that machine.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from ..setup import slots
from . import grade as grading

_lock = threading.Lock()
_worker: dict = {}  # this worker process's scratch folder and exercise templates


def _scratch() -> tuple[Path, grading.Templates]:
    """This worker process's folder for jobs (what dead workers of this machine left is removed)."""
    with _lock:
        if not _worker:
            base = slots.pool_dir().parent / "grade-workers"
            base.mkdir(parents=True, exist_ok=True)
            host = os.uname().nodename
            for old in base.glob(f"{host}-*"):  # a worker that died: its sandboxes' cgroups and links
                pid = old.name.removeprefix(f"{host}-")
                if pid.isdigit() and not _alive(int(pid)):
                    for orphan in grading._pids_under(old):  # its nbgrader, its kernel
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(orphan, signal.SIGKILL)
                    for job in old.glob("job-*"):
                        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                            grading.sandbox.Job.load(job).remove()
                    shutil.rmtree(old, ignore_errors=True)
            work = base / f"{host}-{os.getpid()}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            atexit.register(shutil.rmtree, work, True)
            _worker.update(work=work, templates=grading.Templates(work), warm=set())
        return _worker["work"], _worker["templates"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def run_remote(sub: grading.Submission, notebook: bytes, key: str, settings: grading.Settings):
    """On a worker: grade one notebook; its record and feedback page. A worker whose course or
    grader differs from the grader's (the record's key says so) grades nothing."""
    work, templates = _scratch()
    with tempfile.TemporaryDirectory(dir=work, prefix="in-") as tmp:
        local = replace(sub, path=Path(tmp) / sub.notebook)
        local.path.write_bytes(notebook)
        if grading.input_key(local, settings) != key:
            record = grading.Record(sub.student, sub.assignment, sub.notebook, key, status="grader error")
            record.error = (
                f"worker {os.uname().nodename}: its course or grader is not the grader's "
                "(update its clone and run `make setup-tests`)"
            )
            return record, None
        if settings.sandboxed:
            with _lock:
                if not _worker["warm"]:
                    for warning in grading.preflight(settings):
                        print(f"[grade worker] WARNING: {warning}", flush=True)
                if sub.assignment not in _worker["warm"]:
                    grading.ensure_template_slot({sub.assignment})
                    _worker["warm"].add(sub.assignment)
        feedback = Path(tmp) / "feedback"
        record = grading.run_job(local, templates, work, settings, feedback)
        pages = list(feedback.rglob("*.html"))
        return record, pages[0].read_text() if pages else None


class Cluster:
    """The grader's side: submit jobs to the scheduler at `address`, take their results."""

    def __init__(self, address: str):
        from distributed import Client

        where = urlsplit(address if "://" in address else f"tcp://{address}")
        try:  # a refused connection fails here at once (Dask itself retries until its timeout)
            socket.create_connection((where.hostname, where.port or 8786), timeout=20).close()
            self.client = Client(address, timeout=20)
        except (OSError, ValueError) as exc:
            raise grading.InputError(f"no Dask scheduler answers at {address}: {exc}") from None

    def submit(self, sub: grading.Submission, settings: grading.Settings):
        notebook = sub.path.read_bytes() if sub.path.is_file() else b""
        key = grading.input_key(sub, settings)
        # pure=False: a job that must be graded again is a new task, never a cached result
        return self.client.submit(run_remote, sub, notebook, key, settings, pure=False)

    @staticmethod
    def as_completed(futures):
        from distributed import as_completed

        return as_completed(list(futures))

    @staticmethod
    def result(future, sub: grading.Submission, out: Path) -> grading.Record:
        record, page = future.result()
        if page is not None:
            grading._atomic_write(grading.feedback_path(out / "feedback", sub), page)
        return record

    def close(self) -> None:
        self.client.close()
