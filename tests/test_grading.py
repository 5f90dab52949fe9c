"""`coursekit grade` on a batch of adversarial submissions (issue: sandboxed autograding).

One batch holds an honest solution, an unsolved notebook and submissions that attack the
grader in every way listed in the issue. Each attack sits in one task (or in an extra cell
after the last test), so the expected score is what the untouched tasks are worth. Every
submission must get exactly that score and a clear message; the batch must finish in
bounded time; the grade store must stay consistent, resume after a kill and regrade only
what changed.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT

pytestmark = pytest.mark.full

ASSIGNMENT = "01_rust"
NOTEBOOK = "01_values_moves_clone.ipynb"
SOURCE = ROOT / "solutions" / ASSIGNMENT / NOTEBOOK
RELEASE = ROOT / "exercises" / ASSIGNMENT / NOTEBOOK
POINTS = {"scale": 2, "split_batch": 2, "parameter_clone": 1, "reshape": 2}  # task -> points
FULL = sum(POINTS.values())
CELL_TIMEOUT = 30
SECRET_PORT_FILE = "port"  # the test's TCP server on the host's loopback


def solved():
    return nbformat.read(SOURCE, as_version=4)


def with_solution(nb, task, body):
    """Replace the body of a task's solution (between the BEGIN/END SOLUTION markers)."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == task:
            head, _, rest = cell.source.partition("// BEGIN SOLUTION")
            _, _, tail = rest.partition("// END SOLUTION")
            cell.source = f"{head}// BEGIN SOLUTION\n{body}\n    // END SOLUTION{tail}"
            return nb
    raise KeyError(task)


def with_extra_cell(nb, code):
    nb = copy.deepcopy(nb)
    nb.cells.append(nbformat.v4.new_code_cell(code))
    return nb


def edit_cell(nb, grade_id, fn):
    nb = copy.deepcopy(nb)
    for i, cell in enumerate(nb.cells):
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            nb.cells[i] = nbformat.from_dict(fn(cell))
    return nb


SCALE = "    for x in t.data.iter_mut() { *x *= factor; }\n    t"


def batch(paths: dict) -> dict:
    """student -> (notebook or raw text, expected score, words the record must mention)."""
    good = solved()
    others = paths["other_student"]
    port = paths["port"]
    return {
        "good": (good, FULL, []),
        "unsolved": (nbformat.read(RELEASE, as_version=4), 0, []),
        "infinite_loop": (with_solution(good, "scale", "    loop {}"), FULL - 2, ["TimeoutError"]),
        "memory_bomb": (
            with_solution(
                good,
                "split_batch",
                "    let mut hog = Vec::new();\n    loop { hog.push(vec![1u8; 1 << 26]); }",
            ),
            FULL - 2,
            [],
        ),
        "fork_bomb": (
            with_extra_cell(
                good,
                'for _ in 0..100000 {\n    let _ = std::process::Command::new("sleep")'
                '.arg("600").spawn();\n}',
            ),
            FULL,
            [],
        ),
        "disk_fill": (
            with_extra_cell(
                good,
                "let block = vec![7u8; 1 << 20];\nfor i in 0..100_000 {\n"
                '    std::fs::write(format!("fill-{i}"), &block).unwrap();\n}',
            ),
            FULL,
            [],
        ),
        "network": (
            with_solution(
                good,
                "scale",
                f'    if std::net::TcpStream::connect("127.0.0.1:{port}").is_ok() '
                '{ panic!("the network is reachable") }\n' + SCALE,
            ),
            FULL,
            [],
        ),
        "read_solutions": (
            with_solution(
                good,
                "scale",
                f'    if std::fs::read_to_string("{SOURCE}").is_ok() '
                '{ panic!("read the solutions") }\n' + SCALE,
            ),
            FULL,
            [],
        ),
        "read_other_student": (
            with_solution(
                good,
                "scale",
                f'    if std::fs::read_to_string("{others}").is_ok() '
                '{ panic!("read another submission") }\n' + SCALE,
            ),
            FULL,
            [],
        ),
        "read_gradebook": (
            with_solution(
                good,
                "scale",
                f'    if std::fs::read_to_string("{paths["planted"]}").is_ok() '
                '{ panic!("read the grade store") }\n' + SCALE,
            ),
            FULL,
            [],
        ),
        "modified_tests": (
            edit_cell(
                nbformat.read(RELEASE, as_version=4),
                "test_scale",
                lambda c: {**c, "source": "// tests? what tests"},
            ),
            0,
            [],
        ),
        "deleted_tests": (
            nbformat.from_dict(
                {
                    **good,
                    "cells": [
                        c
                        for c in good.cells
                        if c.metadata.get("nbgrader", {}).get("grade_id") not in ("test_scale", "setup")
                    ],
                }
            ),
            FULL,
            ["test_scale was deleted"],
        ),
        "reordered": (nbformat.from_dict({**good, "cells": list(reversed(good.cells))}), FULL, ["moved"]),
        "changed_cell_types": (
            edit_cell(
                good, "test_reshape", lambda c: nbformat.v4.new_markdown_cell(c.source, metadata=c.metadata)
            ),
            FULL,
            ["test_reshape was turned into markdown"],
        ),
        "invalid_json": ('{"cells": [ this is not json', 0, ["not a readable Jupyter notebook"]),
        "wrong_kernel": (
            nbformat.from_dict(
                {
                    **good,
                    "metadata": {
                        **good.metadata,
                        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                    },
                }
            ),
            FULL,
            ["kernel was changed"],
        ),
        "panic": (with_solution(good, "scale", '    panic!("I give up")'), FULL - 2, ["I give up"]),
        "compile_error": (
            with_solution(good, "split_batch", '    let x: i32 = "nope";\n    todo!()'),
            FULL - 2,
            [],
        ),
        "process_exit": (
            with_solution(good, "parameter_clone", "        std::process::exit(3)"),
            FULL - 1,
            ["RustProcessExited"],
        ),
        "segfault": (
            with_solution(
                good, "reshape", "    unsafe { std::ptr::null_mut::<u64>().write(1) };\n    todo!()"
            ),
            FULL - 2,
            [],
        ),
        "stderr_spam": (with_extra_cell(good, 'for i in 0..200_000 { eprintln!("spam {i}"); }'), FULL, []),
        "output_100mb": (
            with_extra_cell(
                good, 'let line = "x".repeat(1000);\nfor _ in 0..100_000 { println!("{line}"); }'
            ),
            FULL,
            [],
        ),
    }


def write_batch(root: Path, paths: dict) -> dict:
    expected = {}
    for student, (nb, score, words) in batch(paths).items():
        dest = root / student / ASSIGNMENT / NOTEBOOK
        dest.parent.mkdir(parents=True)
        dest.write_text(nb if isinstance(nb, str) else nbformat.writes(nb))
        expected[student] = (score, words)
    return expected


def grade(subs: Path, out: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "COURSEKIT_CELL_TIMEOUT": str(CELL_TIMEOUT), "COURSEKIT_NOTEBOOK_TIMEOUT": "600"}
    return subprocess.run(
        [sys.executable, "-m", "coursekit", "grade", str(subs), "--out", str(out), "--jobs", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        **kw,
    )


def records(out: Path) -> dict:
    return {
        p.parent.parent.name: json.loads(p.read_text())
        for p in (out / "results").glob(f"*/{ASSIGNMENT}/*.json")
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    subs, out = tmp / "submissions", tmp / "out"
    planted = out / "results" / "planted.txt"  # a file of the grade store, there before grading
    planted.parent.mkdir(parents=True)
    planted.write_text("grades")
    paths = {
        "port": server.getsockname()[1],
        "planted": planted,
        "other_student": subs / "good" / ASSIGNMENT / NOTEBOOK,
    }
    expected = write_batch(subs, paths)
    started = time.monotonic()
    result = grade(subs, out, timeout=3600)
    seconds = time.monotonic() - started
    server.close()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return subs, out, expected, seconds


def test_every_submission_gets_its_right_score(graded):
    _, out, expected, _ = graded
    got = records(out)
    assert set(got) == set(expected)
    wrong = {s: (got[s]["score"], score) for s, (score, _) in expected.items() if got[s]["score"] != score}
    assert not wrong, f"student: (got, expected): {wrong}"
    for student, (_, words) in expected.items():
        text = json.dumps(got[student])
        for word in words:
            assert word in text, f"{student}: the record should mention {word!r}: {text[:2000]}"


def test_grades_csv_is_consistent_with_the_records(graded):
    _, out, expected, _ = graded
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert sorted(r["student"] for r in rows) == sorted(expected)
    for row in rows:
        rec = records(out)[row["student"]]
        assert float(row["score"]) == rec["score"] and float(row["max_score"]) == FULL
    assert [r for r in rows if r["student"] == "invalid_json"][0]["status"].startswith("error")


def test_feedback_for_every_student(graded):
    _, out, expected, _ = graded
    for student in expected:
        html = (out / "feedback" / student / ASSIGNMENT / "01_values_moves_clone.html").read_text()
        assert "<html" in html.lower()
    spam = (out / "feedback" / "output_100mb" / ASSIGNMENT / "01_values_moves_clone.html").stat().st_size
    assert spam < 5 * 2**20, "100 MB of output must not reach the feedback"


def test_the_batch_finishes_in_bounded_time_and_leaves_nothing_running(graded):
    _, out, expected, seconds = graded
    assert seconds < 60 * len(expected), seconds
    leftover = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout.split()
    assert leftover == []
    assert not (out / ".work").exists()


def test_rerun_grades_only_what_changed(graded):
    subs, out, _, _ = graded
    before = {s: r["seconds"] for s, r in records(out).items()}
    changed = subs / "unsolved" / ASSIGNMENT / NOTEBOOK
    changed.write_text(nbformat.writes(solved()))
    result = grade(subs, out, timeout=1200)
    assert result.returncode == 0
    assert "graded 1 notebook(s)" in result.stdout
    after = records(out)
    assert after["unsolved"]["score"] == FULL
    assert all(after[s]["seconds"] == t for s, t in before.items() if s != "unsolved")


def test_an_interrupted_batch_resumes(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    for student in ("a", "b", "c"):
        dest = subs / student / ASSIGNMENT / NOTEBOOK
        dest.parent.mkdir(parents=True)
        dest.write_text(nbformat.writes(solved()))
    env = {**os.environ, "COURSEKIT_CELL_TIMEOUT": str(CELL_TIMEOUT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "coursekit", "grade", str(subs), "--out", str(out), "--jobs", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 900
    while not list((out / "results").glob("*/*/*.json")) and time.monotonic() < deadline:
        time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first = {p.parent.parent.name for p in (out / "results").glob("*/*/*.json")}
    assert 1 <= len(first) < 3
    for p in (out / "results").glob("*/*/*.json"):
        json.loads(p.read_text())  # every record on disk is whole
    result = grade(subs, out, timeout=1800)
    assert result.returncode == 0
    assert f"graded {3 - len(first)} notebook(s)" in result.stdout
    assert {r["score"] for r in records(out).values()} == {FULL}


def test_lms_zip_export(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    with zipfile.ZipFile(subs / "zoe_12345_attempt.zip", "w") as z:
        z.writestr(f"{NOTEBOOK}", nbformat.writes(solved()))
        z.writestr("../../escape.ipynb", "{}")
    result = grade(subs, out, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    assert records(out)["zoe"]["score"] == FULL
    assert not (tmp_path / "escape.ipynb").exists()
