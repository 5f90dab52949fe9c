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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="coursekit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("setup", help="install and configure what the course needs (idempotent)")
    p.add_argument("--no-prewarm", action="store_true", help="skip compiling the frameworks")
    p.set_defaults(func=_setup)
    p = sub.add_parser("doctor", help="check every piece and print each problem with its fix")
    p.set_defaults(func=_doctor)
    args = parser.parse_args(argv)
    sys.exit(args.func(args))
