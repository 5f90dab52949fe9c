"""coursekit: the tooling of the Rust-for-PyTorch-developers course."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _setup(args) -> int:
    from .setup.install import SetupError, log, setup
    from .setup.prewarm import prewarm_all

    try:
        setup(purpose=args.purpose)
        if not args.no_prewarm:
            prewarm_all()
    except SetupError as exc:
        print(f"[coursekit setup] FAILED: {exc}", file=sys.stderr)
        return 1
    log("ready")
    return 0


def _doctor(args) -> int:
    from .setup.doctor import doctor

    return doctor()


def _run(args) -> int:
    from .content.notebooks import execute

    for path in args.notebooks:
        print(f"running {path}", flush=True)
        execute(Path(path))
    return 0


def _lab(args) -> int:
    from .pins import ROOT

    url = "lab/tree/course/00_welcome.ipynb"
    print(
        f"[coursekit] starting JupyterLab on {ROOT / 'course'}: open the http://127.0.0.1:{args.port}/"
        f"{url}?token=... address printed below",
        flush=True,
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        f"--port={args.port}",
        f"--ServerApp.root_dir={ROOT}",
        f"--LabApp.default_url=/{url}",
    ]
    if os.geteuid() == 0:  # containers and CI machines run as root
        cmd.append("--allow-root")
    os.execv(sys.executable, cmd)


def _bench(args) -> int:
    from .bench import bench

    print(bench(with_setup=args.setup, frameworks=args.framework, parts=args.only))
    return 0


def _check(args) -> int:
    from .grading import nbgrader_server
    from .learner import memory

    memory.volunteer(500)  # the server below and every nbgrader run inherit it
    nbgrader_server.start()  # imports nbgrader while this process imports the check
    from .learner.check import check

    return check(Path(args.notebook), hints=args.hints, color=sys.stdout.isatty())


def _watch(args) -> int:
    import signal

    from .grading import nbgrader_server
    from .learner import memory

    memory.volunteer(500)
    nbgrader_server.start()
    from .learner.check import watch

    def stop(signum, frame):  # as Ctrl-C: watch closes the kernel it started ahead
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    return watch(Path(args.notebook), hints=args.hints, color=sys.stdout.isatty())


def _progress(args) -> int:
    from .learner.progress import table

    print(table())
    return 0


def _next(args) -> int:
    from .learner.exercises import exercise_path
    from .learner.progress import next_task
    from .pins import ROOT

    task = next_task()
    if task is None:
        print("All tasks pass. Well done.")
        return 0
    print(f"{exercise_path(task).relative_to(ROOT)}: task {task.id} — {task.title}")
    print(f"then: coursekit check {exercise_path(task).relative_to(ROOT)}")
    return 0


def _solution(args) -> int:
    from .learner.exercises import answer, find
    from .learner.progress import done

    try:
        task = find(args.task)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    if not done(task) and not args.force:
        print(f"{task.key} has not passed `coursekit check` yet; solve it first (or add --force).")
        return 1
    print(f"// a reference solution of {task.key} ({task.title})\n{answer(task)}")
    return 0


def _hint(args) -> int:
    from .learner.check import hint

    try:
        return hint(args.task)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2


def _grade(args) -> int:
    from .grading.grade import InputError, Settings, grade

    settings = Settings(sandboxed=not args.no_sandbox, show_hidden_tests=args.show_hidden_tests)
    try:
        records = grade(
            Path(args.submissions),
            Path(args.out),
            jobs=args.jobs,
            settings=settings,
            force=args.force,
            retry_errors=args.retry_errors,
            zip_pattern=args.zip_pattern,
            cluster=args.cluster,
        )
    except InputError as exc:
        print(f"coursekit grade: nothing was graded: {exc}", file=sys.stderr)
        return 2
    errors = [r for r in records if r.error]
    flagged = [r for r in records if r.flags]
    print(
        f"graded {len(records)} notebook(s) ({len(errors)} with errors, {len(flagged)} flagged for review) "
        f"-> {Path(args.out) / 'grades.csv'}"
    )
    return 0


def _clean(args) -> int:
    import glob
    import shutil

    from .setup import doctor, prewarm, rust_src, slots

    removed = slots.prune(everything=args.all, warm=prewarm.current)
    removed += rust_src.prune_lean(rust_src.rustc_version())
    if args.all:
        cache = doctor.evcxr_cache()
        removed.append((cache, slots.size(cache)))
        shutil.rmtree(cache, ignore_errors=True)
    from .learner.check import TEMPLATES

    if TEMPLATES.is_dir():  # rebuilt by the next check in seconds
        removed.append((TEMPLATES, slots.size(TEMPLATES)))
        shutil.rmtree(TEMPLATES, ignore_errors=True)
    for log in glob.glob("/tmp/coursekit-evcxr-*.log"):  # left by kernels of older versions
        removed.append((Path(log), os.path.getsize(log)))
        os.unlink(log)
    for path, size in removed:
        print(f"removed {path} ({size / 2**20:.0f} MiB)")
    print(
        f"freed {sum(s for _, s in removed) / 2**30:.2f} GiB"
        + ("; run `make setup` to warm up again" if args.all else "")
    )
    return 0


def _cheatsheet(args) -> int:
    from .content.cheatsheet import run

    return run(args)


COMMANDS = {
    "setup": (_setup, "install and configure what the course needs (idempotent)"),
    "doctor": (_doctor, "check every piece and print each problem with its fix"),
    "lab": (_lab, "start JupyterLab on the course"),
    "run": (_run, "execute notebooks in place and save their cleaned outputs"),
    "bench": (_bench, "measure compile times and cell latencies (bench/results.md)"),
    "check": (_check, "run an exercise's visible and hidden tests, task by task"),
    "watch": (_watch, "check an exercise again each time it is saved; show what changed"),
    "progress": (_progress, "which exercises and tasks you have done"),
    "next": (_next, "the next unsolved task"),
    "hint": (_hint, "a hint for a task: a nudge first, then a stronger one"),
    "solution": (_solution, "a task's reference solution, once the task passes"),
    "clean": (_clean, "remove build directories and caches no kernel needs (--all: the warm ones too)"),
    "grade": (_grade, "autograde a folder (or LMS zips) of submissions, sandboxed and in parallel"),
    "cheatsheet": (_cheatsheet, "regenerate or check the PyTorch → Rust cheat-sheet (course/02_tensors)"),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="coursekit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = {name: sub.add_parser(name, help=text) for name, (_, text) in COMMANDS.items()}
    for name, (func, _) in COMMANDS.items():
        p[name].set_defaults(func=func)
    p["setup"].add_argument("--no-prewarm", action="store_true", help="skip compiling the frameworks")
    p["setup"].add_argument(
        "--for",
        dest="purpose",
        choices=["learner", "grading", "tests"],
        default="learner",
        help="which Debian helpers to install too: none (learner), bubblewrap (grading), "
        "bubblewrap, chromium, mold and ccache (tests)",
    )
    p["lab"].add_argument("--port", type=int, default=8888)
    p["run"].add_argument("notebooks", nargs="+")
    p["bench"].add_argument("--setup", action="store_true", help="also time a whole set-up on a fresh HOME")
    p["bench"].add_argument("--framework", action="append", help="only these frameworks (repeatable)")
    p["bench"].add_argument(
        "--only",
        action="append",
        choices=["frameworks", "startup", "loop", "overhead", "grading", "binder", "image"],
        help="only these parts",
    )
    p["check"].add_argument("notebook", help="e.g. exercises/01_rust/01_values_moves_clone.ipynb")
    p["check"].add_argument("--hints", action="store_true", help="show the first hint of each failing task")
    p["watch"].add_argument("notebook", help="e.g. exercises/01_rust/01_values_moves_clone.ipynb")
    p["watch"].add_argument("--hints", action="store_true", help="show the first hint of each failing task")
    p["clean"].add_argument("--all", action="store_true", help="also the warm directories and evcxr's cache")
    p["hint"].add_argument("task", help="ASSIGNMENT/TASK or TASK, as `coursekit check` names it")
    p["solution"].add_argument("task", help="ASSIGNMENT/TASK or TASK, as `coursekit check` names it")
    p["solution"].add_argument("--force", action="store_true", help="show it even if the task does not pass")
    p["grade"].add_argument("submissions", help="folder of STUDENT/ASSIGNMENT/*.ipynb and/or *.zip")
    p["grade"].add_argument("--out", default="grading", help="output folder (default: grading/)")
    p["grade"].add_argument("--jobs", type=int, help="parallel jobs (default: the number of cores)")
    p["grade"].add_argument("--no-sandbox", action="store_true", help="trusted notebooks only")
    p["grade"].add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="grade on the workers of this Dask scheduler (tcp://HOST:8786) instead of here",
    )
    p["grade"].add_argument("--force", action="store_true", help="regrade everything, changed or not")
    p["grade"].add_argument(
        "--retry-errors",
        action="store_true",
        help="regrade the notebooks whose grading failed (grader errors)",
    )
    p["grade"].add_argument(
        "--zip-pattern",
        help="regular expression for a zip file's name, with a `student` group (default: STUDENT.zip "
        "or STUDENT_anything.zip)",
    )
    p["grade"].add_argument(
        "--show-hidden-tests", action="store_true", help="let the feedback show the hidden tests' code"
    )
    from .content.cheatsheet import add_arguments as cheatsheet_arguments

    cheatsheet_arguments(p["cheatsheet"])
    args = parser.parse_args(argv)
    sys.exit(args.func(args))
