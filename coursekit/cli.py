"""The `coursekit` command."""

from __future__ import annotations

import argparse
import sys


def _setup(args) -> int:
    from .install import SetupError, setup

    try:
        setup(prewarm=not args.no_prewarm)
    except SetupError as exc:
        print(f"[coursekit setup] FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


def _doctor(args) -> int:
    from .doctor import doctor

    return doctor()


def _run(args) -> int:
    from pathlib import Path

    from .notebooks import execute

    for path in args.notebooks:
        print(f"running {path}", flush=True)
        execute(Path(path))
    return 0


def _lab(args) -> int:
    import os

    from .pins import ROOT

    url = "lab/tree/course/00_welcome.ipynb"
    print(
        f"[coursekit] starting JupyterLab on {ROOT / 'course'}; open the http://127.0.0.1:{args.port}/"
        f"{url}?token=... address it prints below",
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
    os.execv(sys.executable, cmd)


def _bench(args) -> int:
    from .bench import bench

    print(bench(with_setup=args.setup, frameworks=args.framework))
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="coursekit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("setup", help="install and configure what the course needs (idempotent)")
    p.add_argument("--no-prewarm", action="store_true", help="skip compiling the frameworks")
    p.set_defaults(func=_setup)
    p = sub.add_parser("doctor", help="check every piece and print each problem with its fix")
    p.set_defaults(func=_doctor)
    p = sub.add_parser("run", help="execute notebooks in place and save their cleaned outputs")
    p.add_argument("notebooks", nargs="+")
    p.set_defaults(func=_run)
    p = sub.add_parser("lab", help="start JupyterLab on the course")
    p.add_argument("--port", type=int, default=8888)
    p.set_defaults(func=_lab)
    p = sub.add_parser("bench", help="measure compile times and cell latencies (bench/results.md)")
    p.add_argument("--setup", action="store_true", help="also time a whole set-up on a fresh HOME")
    p.add_argument("--framework", action="append", help="only these frameworks (repeatable)")
    p.set_defaults(func=_bench)
    args = parser.parse_args(argv)
    sys.exit(args.func(args))
