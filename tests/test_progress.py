"""The learner's side: `coursekit check`, `progress`, `next` and `solution`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from coursekit.learner import exercises

NOTEBOOK = "01_values_moves_clone.ipynb"


def coursekit(*args, state, timeout=900) -> subprocess.CompletedProcess:
    env = {**os.environ, "COURSEKIT_STATE": str(state)}
    return subprocess.run(
        [sys.executable, "-m", "coursekit", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_task_ids_are_unique_per_assignment():
    keys = [t.key for t in exercises.all_tasks()]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert all(t.tests and len(t.hints) >= 2 for t in exercises.all_tasks())


def test_solution_is_withheld_until_the_task_passes(tmp_path):
    state = tmp_path / "state.json"
    refused = coursekit("solution", "01_rust/scale", state=state)
    assert refused.returncode == 1 and "has not passed" in refused.stdout
    forced = coursekit("solution", "01_rust/scale", "--force", state=state)
    assert forced.returncode == 0 and "t.data.iter_mut()" in forced.stdout
    assert "SOLUTION" not in forced.stdout, "printed clean, without nbgrader's markers"
    assert coursekit("solution", "no_such_task", state=state).returncode == 2


@pytest.mark.full
def test_check_then_progress_next_and_solution(tmp_path):
    state = tmp_path / "state.json"
    work = tmp_path / "01_rust"
    work.mkdir()
    mine = work / NOTEBOOK
    shutil.copy(ROOT / "exercises" / "01_rust" / NOTEBOOK, mine)
    add_cell(mine, 'std::fs::write("written_by_a_cell.txt", "x").unwrap();')

    unsolved = coursekit("check", str(mine), state=state)
    assert unsolved.returncode == 1
    assert "FAIL scale" in unsolved.stdout and "not yet implemented" in unsolved.stdout
    assert "hint: " not in unsolved.stdout, "a hint only when asked"
    assert "`coursekit hint 01_rust/scale` gives a hint" in unsolved.stdout
    assert "0/4 tasks pass" in unsolved.stdout
    # while it runs, a line when the kernel (started ahead, as nbgrader starts) is ready and
    # one per test, before the verdicts
    running = unsolved.stdout.split("FAIL scale")[0]
    assert re.search(r"\[ *\d+ s\] kernel ready", running), unsolved.stdout
    assert sorted(os.listdir(work)) == [NOTEBOOK], "the cells ran in a private directory"
    assert re.search(r"\[ *\d+ s\] test_scale failed", running), unsolved.stdout
    scale = exercises.find("01_rust/scale")
    first, second, third = (coursekit("hint", "01_rust/scale", state=state) for _ in range(3))
    assert "hint 1/2" in first.stdout and scale.hints[0] in first.stdout  # a nudge first
    assert "hint 2/2" in second.stdout and scale.hints[1] in second.stdout  # then a stronger one
    assert "hint 2/2" in third.stdout and "last hint" in third.stdout

    shutil.copy(ROOT / "solutions" / "01_rust" / NOTEBOOK, mine)
    solved = coursekit("check", str(mine), state=state)
    assert solved.returncode == 0, solved.stdout
    assert "4/4 tasks pass" in solved.stdout and "hint: " not in solved.stdout
    assert re.search(r"\[ *\d+ s\] test_reshape passed", solved.stdout), solved.stdout
    with_hints = coursekit("check", str(mine), "--hints", state=state)
    assert with_hints.stdout.count("hint: ") == 0, "no hint for tasks that pass"

    recorded = json.loads(state.read_text())["tasks"]
    assert all(
        recorded[f"01_rust/{t}"]["passed"] for t in ("scale", "split_batch", "parameter_clone", "reshape")
    )
    progress = coursekit("progress", state=state)
    assert f"01_rust/{NOTEBOOK}" in progress.stdout and "4/4" in progress.stdout
    nxt = coursekit("next", state=state)
    first_other = next(t for t in exercises.all_tasks() if t.notebook != NOTEBOOK)
    assert f"task {first_other.id}" in nxt.stdout
    assert coursekit("solution", "01_rust/scale", state=state).returncode == 0


@pytest.mark.full
def test_a_check_runs_in_the_kernel_started_ahead_or_a_fresh_one_if_it_died(tmp_path, capsys):
    """`watch`'s kernel started ahead: the check runs in it, its cells in a private directory;
    if that kernel died meanwhile (a zombie its parent has not reaped yet), in a fresh one."""
    import signal
    import time

    import psutil

    from coursekit.learner import check

    mine = tmp_path / "01_rust" / NOTEBOOK
    mine.parent.mkdir()
    shutil.copy(ROOT / "solutions" / "01_rust" / NOTEBOOK, mine)
    add_cell(mine, 'std::fs::write("written_by_a_cell.txt", "x").unwrap();')
    for dies in (False, True):
        ahead = check.kernel_ahead(mine)
        try:
            if dies:
                os.killpg(ahead.km.provisioner.pid, signal.SIGKILL)
                while psutil.Process(ahead.km.provisioner.pid).status() != psutil.STATUS_ZOMBIE:
                    time.sleep(0.05)
            _, results, summary = check.verdicts(mine, check.exercise_tasks(mine), ahead=ahead)
            assert os.listdir(ahead.cwd) == ([] if dies else ["written_by_a_cell.txt"])
        finally:
            ahead.close()
        out = capsys.readouterr().out
        assert re.search(r"\[ *\d+ s\] kernel " + ("started" if dies else "ready"), out), out
        assert summary.startswith("4/4 tasks pass") and all(ok for ok, _ in results.values()), out
        assert sorted(os.listdir(mine.parent)) == [NOTEBOOK]


def test_memory_free_is_the_nearest_cgroup_limit(tmp_path, monkeypatch):
    """A Binder pod's limit, not the machine's free memory, is what a kernel may take."""
    import psutil

    from coursekit.learner.memory import free as memory_free

    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("M", (), {"available": 20 << 30}))
    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    (root / "pod" / "kernel").mkdir(parents=True)
    proc.mkdir()
    (proc / "cgroup").write_text("0::/pod/kernel\n")
    (root / "pod" / "kernel" / "memory.max").write_text("max\n")
    (root / "pod" / "kernel" / "memory.current").write_text(str(1 << 30))
    assert memory_free(root, proc) == 20 << 30, "no limit: the machine's available memory"
    (root / "pod" / "memory.max").write_text(str(2 << 30))
    (root / "pod" / "memory.current").write_text(str(3 << 29))
    assert memory_free(root, proc) == 1 << 29, "a limit above the process's own cgroup counts"
    (proc / "cgroup").write_text("0::/\n")
    assert memory_free(root, proc) == 20 << 30
    v1 = root / "memory" / "pod"  # cgroup v1: the memory controller's own tree
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(2 << 30))
    (v1 / "memory.usage_in_bytes").write_text(str(7 << 28))
    (proc / "cgroup").write_text("4:memory:/pod\n1:cpu:/\n0::/\n")
    assert memory_free(root, proc) == 1 << 28


def test_oom_kills_are_counted_by_the_nearest_memory_cgroup(tmp_path):
    """Running out of memory is told by the cgroup's counter, v2 or v1, nearest first; without
    one (macOS, no /proc) nothing is counted, and volunteering for the OOM killer is a no-op."""
    from coursekit.learner.memory import oom_kills

    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    (root / "pod" / "check").mkdir(parents=True)
    proc.mkdir()
    (proc / "cgroup").write_text("0::/pod/check\n")
    assert oom_kills(root, proc) == 0, "no counter anywhere"
    (root / "pod" / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n")
    assert oom_kills(root, proc) == 2, "the pod's counter, where the check's own group has none"
    (root / "pod" / "check" / "memory.events").write_text("oom 1\noom_kill 1\n")
    assert oom_kills(root, proc) == 1
    v1 = root / "memory" / "pod"
    v1.mkdir(parents=True)
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (proc / "cgroup").write_text("4:memory:/pod\n1:cpu:/\n")
    assert oom_kills(root, proc) == 3
    assert oom_kills(root, tmp_path / "no-proc") == 0
    volunteered = subprocess.run(  # not this process: the kernels it starts would inherit it
        [sys.executable, "-c", VOLUNTEER], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert volunteered.stdout.strip() == ("1000" if sys.platform == "linux" else "")


def test_a_check_stops_its_job_once_told_why(tmp_path, monkeypatch):
    """`stop_when` (a check's: memory ran out) stops nbgrader and what it started, and the
    reason ends the job's output."""
    import time
    from types import SimpleNamespace

    from coursekit.grading import grade

    course = tmp_path / "course"
    course.mkdir()

    def nbgrader(course, args, env, timeout):  # a job that would run for a minute
        return subprocess.run(["sleep", "60"], cwd=course, capture_output=True, text=True)

    monkeypatch.setattr(grade, "run_nbgrader", nbgrader)
    asked = []

    def stop_when():
        asked.append(True)
        return "memory ran out" if len(asked) > 2 else None

    started = time.monotonic()
    job = SimpleNamespace(root=tmp_path / "job")
    result = grade._watched(course, [], {}, job, grade.Settings(sandboxed=False), None, stop_when)
    assert result.stdout.endswith("[stopped: memory ran out]")
    assert time.monotonic() - started < 50, "the job ran on"


VOLUNTEER = """
from coursekit.learner.memory import volunteer
volunteer()
try:
    print(open("/proc/self/oom_score_adj").read())
except OSError:
    pass
"""


def add_cell(path, source: str) -> None:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(source))
    nbformat.write(nb, path)


def with_answers(path, answers: dict[str, str]) -> None:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    nbformat.write(nb, path)


@pytest.mark.full
def test_check_shows_the_real_error_whole_and_names_hidden_tests(tmp_path):
    """A compile error in the learner's cell is shown (rustc's message, the line of their
    cell) instead of the test's knock-on errors; a multi-line panic is shown whole; a failure
    in the hidden part of a test is named as hidden."""
    mine = tmp_path / "01_rust" / NOTEBOOK
    mine.parent.mkdir()
    shutil.copy(ROOT / "solutions" / "01_rust" / NOTEBOOK, mine)
    with_answers(
        mine,
        {
            "scale": "fn scale(mut t: Tensor, factor: f32) -> Tensor {\n"
            "    for x in t.data.iter_mut() { *x *= factor; }\n"
            '    let label: String = "scaled";\n'
            "    t\n}",
            # right on the visible case, wrong past the end (split_off panics)
            "split_batch": "fn split_batch(mut rows: Vec<Vec<f32>>, n_train: usize)"
            " -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {\n"
            "    let valid = rows.split_off(n_train);\n    (rows, valid)\n}",
            "parameter_clone": "#[derive(Debug)]\n"
            "struct Parameter { value: Vec<f32>, grad: Option<Vec<f32>> }\n"
            "impl Clone for Parameter {\n    fn clone(&self) -> Self {\n"
            '        panic!("first line of the message\\nsecond line of the message")\n    }\n}',
        },
    )
    out = coursekit("check", str(mine), state=tmp_path / "state.json").stdout
    scale, rest = out.split("FAIL split_batch")
    assert "FAIL scale" in scale and "mismatched types" in scale and "E0308" in scale, out
    assert "line 3 of your cell" in scale and "command_" not in scale, out
    assert "cannot find function" not in scale, "the knock-on error of the test, not the cause"
    split, clone = rest.split("FAIL parameter_clone")
    assert "hidden test test_split_batch" in split, out
    assert "first line of the message" in clone and "second line of the message" in clone, out
    assert "PASS reshape" in out and "1/4 tasks pass" in out


@pytest.mark.parametrize("memory", ["enough", "too little"])
def test_watch_checks_again_when_the_code_changes_and_shows_what_changed(
    tmp_path, monkeypatch, capsys, memory
):
    """`coursekit watch`: a save that changes only outputs does not check again; a save that
    changes code does, and reports only the tasks whose verdict or report changed. After a
    verdict, the next check's kernel starts ahead where memory allows; every one is closed."""
    import threading
    import time

    import nbformat

    from coursekit.learner import check

    path = tmp_path / NOTEBOOK
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("fn scale() { todo!() }")])
    nbformat.write(nb, path)
    seen, started, closed = [], [], []

    class FakeAhead:
        def __init__(self, notebook):
            started.append(self)

        def close(self):
            closed.append(self)

    def fake_verdicts(notebook, tasks, hints, color, ahead):
        if memory == "enough" and seen:
            assert ahead in started and ahead not in closed, "the kernel started after the last verdict"
        else:
            assert ahead is None
        code = check.code_of(notebook)
        seen.append(code)
        solved = "todo" not in code
        tasks = {
            "01_rust/scale": (solved, "PASS scale" if solved else "FAIL scale"),
            "01_rust/other": (False, "FAIL other"),
        }
        return [], tasks, f"{int(solved)}/2 tasks pass"

    monkeypatch.setattr(check, "verdicts", fake_verdicts)
    monkeypatch.setattr(check, "kernel_ahead", FakeAhead)
    monkeypatch.setattr(check, "exercise_tasks", lambda notebook: ["a task"])
    monkeypatch.setattr(check.memory, "free", lambda: check.AHEAD_NEEDS - (memory != "enough"))
    ahead = 1 if memory == "enough" else 0
    watcher = threading.Thread(target=check.watch, args=(path,), kwargs={"interval": 0.02, "rounds": 2})
    watcher.start()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="ran\n")]  # outputs only
    nbformat.write(nb, path)
    time.sleep(0.2)
    assert len(seen) == 1, "a save without a code change checked again"
    assert len(started) == ahead and not closed, "the next check's kernel starts after a verdict"
    nb.cells[0].source = "fn scale() { 2 }"
    nbformat.write(nb, path)
    watcher.join(timeout=10)
    assert not watcher.is_alive() and len(seen) == 2
    assert len(started) == ahead and closed == started, "no kernel left running"
    out = capsys.readouterr().out
    assert ("too little memory free" in out) == (memory != "enough")
    first, second = out.split("1/2 tasks pass")[0], out.split("0/2 tasks pass")[1]
    assert "FAIL scale" in first and "FAIL other" in first
    assert "PASS scale" in second and "FAIL other" not in second
