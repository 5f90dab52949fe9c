"""The server that nbgrader runs are forked from, with nbgrader imported once (2 s saved per
run). The standard library only, so that `coursekit check` and `watch` start it first thing:
it imports nbgrader while they import the rest."""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.forkserver
import sys


def forkable() -> bool:
    """Whether a run may be forked: not from a script, whose top level each child would run
    again (multiprocessing imports a `__main__` not started with `python -m`), nor from a
    process that may not have children of its own (a Dask worker)."""
    main = sys.modules.get("__main__")
    by_name = getattr(getattr(main, "__spec__", None), "name", "") or ""
    safe_main = by_name.endswith("__main__") or not hasattr(main, "__file__")
    return safe_main and not multiprocessing.current_process().daemon


@functools.cache
def context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["nbgrader.apps", "coursekit.grading.harness", "coursekit.grading.sandbox"])
    return ctx


def start() -> None:
    """Start the server if runs are forked; it imports nbgrader in the background."""
    if forkable():
        context()
        multiprocessing.forkserver.ensure_running()
