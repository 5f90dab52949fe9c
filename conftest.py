"""Shared by every test run, whatever paths it names (course/ notebooks alone too): the
repository root, a kernel session per test module, one worker per notebook under xdist,
nbval's comparison up to floating-point noise, and nbval's kernels started again when a
port was taken."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest

from coursekit.content.float_noise import keep_matching
from coursekit.kernel.session import KernelSession, start_retrying

ROOT = Path(__file__).resolve().parent


@contextlib.contextmanager
def kernels_on_a_taken_port(how_many: int):
    """A KernelManager class whose first `how_many` instances start their kernel on a TCP port
    that another process holds (the port race of coursekit.kernel.session.start_retrying), and
    the list of the instances made."""
    import socket

    from jupyter_client.manager import KernelManager

    managers = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()

        class OnATakenPort(KernelManager):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                if len(managers) < how_many:
                    self.cache_ports = False  # else the launcher picks the ports again
                    self.control_port = taken.getsockname()[1]
                managers.append(self)

        yield OnATakenPort, managers


@pytest.fixture
def port_taken_first():
    with kernels_on_a_taken_port(1) as taken:
        yield taken


@pytest.fixture(scope="module")
def kernel():
    session = KernelSession()
    yield session
    session.close()


def _compare_up_to_noise():
    """nbval compares a cell's outputs exactly; figures that differ only by floating-point
    noise between CPUs (coursekit/content/float_noise.py) count as reproduced."""
    from nbval.plugin import IPyNbCell

    exact = IPyNbCell.compare_outputs

    def compare_outputs(self, test, ref, skip_compare=None):  # both with their streams coalesced
        return exact(self, keep_matching(test, ref), ref, skip_compare)

    IPyNbCell.compare_outputs = compare_outputs


_compare_up_to_noise()


def _start_nbval_kernels_again_on_a_taken_port():
    """nbval starts each notebook's kernel on TCP ports Jupyter picked; another test starting a
    kernel may take one first: start it again on new ones (coursekit.kernel.session)."""
    import nbval.kernel

    start = nbval.kernel.start_new_kernel
    nbval.kernel.start_new_kernel = lambda *args, **kw: start_retrying(lambda: start(*args, **kw))


_start_nbval_kernels_again_on_a_taken_port()


# Test modules whose tests share nothing: xdist may spread them over its workers. Every other
# module (a notebook's cells share a kernel; module fixtures) runs whole on one worker.
INDEPENDENT = {"tests/test_exercises.py", "tests/test_cheatsheet.py"}
# The longest first (measured in whole runs), so that no worker is left with one at the end.
LONGEST = [
    "tests/test_grading.py",
    "tests/test_exercises.py",
    "course/04_training/05_comparison.ipynb",
    "course/05_porting/05_benchmarks.ipynb",
    "tests/test_progress.py",
    "course/05_porting/03_burn.ipynb",
    "course/02_tensors/03_burn.ipynb",
    "tests/test_shipping.py",
    "course/04_training/03_burn.ipynb",
    "tests/test_grading_cluster.py",
]


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


def pytest_collection_modifyitems(config, items):
    """Notebook cells collected by nbval belong to the full tier; the longest modules come
    first."""
    for item in items:
        if type(item).__name__ == "IPyNbCell":
            item.add_marker(pytest.mark.full)
    rank = {m: i for i, m in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(LONGEST)))


@pytest.hookimpl(optionalhook=True)  # without xdist, no such hook
def pytest_xdist_make_scheduler(config, log):
    """Under `-n`: a module's tests go to one worker, in collection order (the independent
    modules' tests one by one). xdist's own `--dist loadgroup` cannot do this under pytest 9,
    whose node ids no longer take the group suffix it relies on."""
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 (only under xdist)

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = _module(nodeid)
            return nodeid if module in INDEPENDENT else module

    config.option.loadscopereorder = False  # keep the longest-first order
    return ByModule(config, log)


# -- time per test module: printed at the end, and kept for `make bench` (bench/results.md) --
TIMES = ROOT / ".coursekit" / "test-times.json"
_module_s: dict[str, float] = {}
_started = time.time()
_config = None


def pytest_configure(config):
    global _config
    _config = config


def pytest_runtest_logreport(report):
    module = _module(report.nodeid)
    _module_s[module] = _module_s.get(module, 0.0) + report.duration
    # A failure is named as it happens: a run stopped by a time limit still says what failed.
    terminal = _config.pluginmanager.get_plugin("terminalreporter")
    if report.failed and terminal and not hasattr(_config, "workerinput"):
        terminal.write_line(f"\nFAILED {report.nodeid} ({report.when}, {report.duration:.0f} s)")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput") or not _module_s:
        return
    slowest = sorted(_module_s.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep("=", "time per test module (sum over its tests)")
    for module, seconds in slowest[:30]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {module}")
    filtered = config.option.markexpr or config.option.keyword
    if not filtered and config.args == config.getini("testpaths"):  # a whole run stands for the suite
        stats = terminalreporter.stats
        TIMES.parent.mkdir(exist_ok=True)
        TIMES.write_text(
            json.dumps(
                {
                    "finished": time.strftime("%Y-%m-%d %H:%M"),
                    "wall_s": round(time.time() - _started, 1),
                    "workers": getattr(config.option, "numprocesses", None) or 1,
                    "passed": len(stats.get("passed", [])),
                    "failed": len(stats.get("failed", [])),
                    "modules": {m: round(s, 1) for m, s in slowest},
                },
                indent=1,
            )
        )
