"""`coursekit grade` on a batch of adversarial submissions (issues: sandboxed autograding;
grading never lies).

One batch holds an honest solution, an unsolved notebook and submissions that attack the
grader: forging passes (a silenced panic hook, assertion macros redefined, Python patching
the kernel, a process stealing the kernel's key), losing points for nothing (killed
kernels, edited or broken metadata), escaping limits (memory, processes, disk through hard
links and the runtime directory, one huge line of output, /etc/shadow, the grader's
environment), and identity (a zip naming another student, names that sanitise alike). Each
attack sits in one task or in a cell of the student's own, so the expected score is what
the untouched tasks are worth; every submission must get exactly that score, the record
must name the limit that fired, and nothing secret may reach the feedback.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
CELL_TIMEOUT = 60
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


def with_cell_after(nb, grade_id, code):
    """A cell of the student's own right after the cell `grade_id`."""
    nb = copy.deepcopy(nb)
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(code))
    return nb


# A Rust cell that starts a Python process hunting for the kernels' connection files (and
# the key that signs messages) to make the kernel run Python that forges results.
THIEF = r"""
let out = std::process::Command::new("python").arg("-c").arg(r#"
import glob, json, os
from jupyter_client import BlockingKernelClient
places = glob.glob("/tmp/ck-*/*.json") + glob.glob(os.environ.get("JUPYTER_RUNTIME_DIR", "/x") + "/*.json")
places += glob.glob("/tmp/*.json") + glob.glob(os.path.expanduser("~/.local/share/jupyter/runtime/*.json"))
for path in places:
    try:
        info = json.load(open(path))
    except Exception:
        continue
    print("FOUND KEY in", path)
    kc = BlockingKernelClient(); kc.load_connection_info(info); kc.start_channels()
    patch = "import coursekit.kernel.outputs as o\no.CellOutputs.outcome = lambda self, *a: None"
    kc.execute("%%python\n" + patch)
print("thief done")
"#).output().unwrap();
println!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
"""
# The code a test cell runs is on disk while the student's code runs (evcxr's src/lib.rs):
# read the run's secret there, print a forged proof with evcxr's content markers, and open a
# block that would swallow the harness's report of the failure.
FORGE = r"""    use std::io::Write;
    let dir = std::env::var(concat!("EVCXR", "_TMPDIR")).unwrap_or_default();
    let src = std::fs::read_to_string(format!("{dir}/src/{}", concat!("lib", ".rs"))).unwrap_or_default();
    let key = "grading::test(\"";
    if let Some(at) = src.find(key) {
        let nonce: String = src[at + key.len()..].chars().take_while(|c| *c != '"').collect();
        let (begin, end) = (concat!("EVCXR", "_BEGIN_CONTENT"), concat!("EVCXR", "_END_CONTENT"));
        let proof = format!("{{\"nonce\": \"{nonce}\"}}");
        let forged = format!(
            "{begin} application/x-coursekit-test-passed\n{proof}\n{end}\n{begin} text/plain\n"
        );
        let mut out = std::io::stdout().lock();
        out.write_all(forged.as_bytes()).ok();
        out.flush().ok();
    }
    t"""
LEAK = r"""    let dir = std::env::var(concat!("EVCXR", "_TMPDIR")).unwrap_or_default();
    let path = format!("{dir}/src/{}", concat!("lib", ".rs"));
    println!("{}", std::fs::read_to_string(path).unwrap_or_default());
"""
PYTHON_PATCH = "%%python\nimport coursekit.kernel.outputs as o\no.CellOutputs.outcome = lambda self, *a: None"
FAKE_ASSERTS = "".join(
    f"macro_rules! {m} {{ ($($t:tt)*) => {{}} }}\n" for m in ("assert", "assert_eq", "assert_ne")
)


def batch(paths: dict) -> dict:
    """student -> (notebook or raw text, expected score, words the record must mention)."""
    good = solved()
    unsolved = nbformat.read(RELEASE, as_version=4)
    others = paths["other_student"]
    port = paths["port"]
    garbage = json.loads(nbformat.writes(good))
    garbage["cells"][0]["metadata"] = "not a dict"
    for cell in garbage["cells"]:
        if (
            cell["metadata"] != "not a dict"
            and cell["metadata"].get("nbgrader", {}).get("grade_id") == "setup"
        ):
            cell["metadata"]["nbgrader"] = ["not", "a", "dict"]
    return {
        "good": (good, FULL, []),
        "unsolved": (unsolved, 0, []),
        # forging a pass
        "silent_hook": (with_cell_after(unsolved, "scale", "std::panic::set_hook(Box::new(|_| {}));"), 0, []),
        "silent_hook_inside": (
            with_solution(good, "scale", "    std::panic::set_hook(Box::new(|_| {}));\n    todo!()"),
            FULL - 2,
            [],
        ),
        "fake_asserts": (with_cell_after(unsolved, "scale", FAKE_ASSERTS), 0, []),
        "python_patch": (
            with_cell_after(unsolved, "scale", PYTHON_PATCH),
            0,
            ["%%python cells were not run"],
        ),
        "python_answer": (
            edit_cell(unsolved, "scale", lambda c: {**c, "source": PYTHON_PATCH}),
            0,
            ["answer cell scale was turned into Python"],
        ),
        "connection_thief": (with_cell_after(unsolved, "scale", THIEF), 0, []),
        "forged_proof": (with_solution(good, "scale", FORGE), FULL - 2, ["ForgedOutput"]),
        "dep_override": (
            with_cell_after(good, "scale", ':dep coursekit_prelude = { path = "/tmp/mine" }\nlet mine = 1;'),
            FULL,
            ["evcxr commands and shell lines are not run", "writes evcxr commands"],
        ),
        "hidden_leak": (with_solution(good, "scale", LEAK + SCALE), FULL, []),  # the feedback test reads it
        "script_in_output": (
            with_cell_after(
                good,
                "scale",
                'display_html(&format!("<script>window.pwned_{}=1</script><b>bold_{}</b>", 4, 2));',
            ),
            FULL,
            [],
        ),
        # losing points for nothing
        "kill_all": (
            with_cell_after(
                good,
                "test_split_batch",
                'std::process::Command::new("kill").args(["-9", "-1"]).status().ok();',
            ),
            FULL,
            ["the kernel died"],
        ),
        "kill_in_test": (
            with_solution(
                good,
                "parameter_clone",
                '        std::process::Command::new("kill").args(["-9", "-1"]).status().ok();\n'
                "        todo!()",
            ),
            FULL - 1,
            ["KernelDied", "the kernel died"],
        ),
        "metadata_edit": (
            edit_cell(
                good,
                "scale",
                lambda c: {
                    **c,
                    "metadata": {
                        **c.metadata,
                        "nbgrader": {**c.metadata.nbgrader, "grade": True, "points": 10},
                    },
                },
            ),
            FULL,
            ["metadata of cell scale was changed"],
        ),
        "metadata_garbage": (json.dumps(garbage), FULL, ["metadata that is not a JSON object"]),
        # limits
        "infinite_loop": (with_solution(good, "scale", "    loop {}"), FULL - 2, ["CellTimeoutError"]),
        "memory_bomb": (
            with_solution(
                good,
                "split_batch",
                "    let mut hog = Vec::new();\n    loop { hog.push(vec![1u8; 1 << 26]); }",
            ),
            FULL - 2,
            ["memory limit"],
        ),
        "fork_bomb": (
            with_extra_cell(
                good,
                'for _ in 0..100000 {\n    let _ = std::process::Command::new("sleep")'
                '.arg("600").spawn();\n}',
            ),
            FULL,
            ["limit of 512 processes"],
        ),
        "disk_hardlinks": (
            with_extra_cell(
                good,
                'let block = vec![7u8; 1 << 20];\nlet dir = std::env::var("EVCXR_TMPDIR").unwrap();\n'
                'for i in 0..3 {\n    let f = format!("{dir}/fill-{i}");\n'
                "    let mut file = std::fs::File::create(&f).unwrap();\n"
                "    for _ in 0..120 { std::io::Write::write_all(&mut file, &block).unwrap(); }\n"
                '    for j in 0..3 { std::fs::hard_link(&f, format!("{f}-link{j}")).unwrap(); }\n}\n'
                "std::thread::sleep(std::time::Duration::from_secs(20));",
            ),
            0,
            ["wrote more than 256 MiB"],
        ),
        "runtime_fill": (
            with_extra_cell(
                good,
                'let block = vec![7u8; 1 << 20];\nlet dir = std::env::var("JUPYTER_RUNTIME_DIR").unwrap();\n'
                'for i in 0..400 { std::fs::write(format!("{dir}/fill-{i}"), &block).unwrap(); }\n'
                "std::thread::sleep(std::time::Duration::from_secs(20));",
            ),
            0,
            ["wrote more than 256 MiB"],
        ),
        "inode_fill": (
            with_extra_cell(
                good,
                'let dir = std::env::var("EVCXR_TMPDIR").unwrap();\n'
                'for i in 0..400_000 { if std::fs::create_dir(format!("{dir}/d{i}")).is_err() { break; } }\n'
                "std::thread::sleep(std::time::Duration::from_secs(20));",
            ),
            0,
            ["wrote more than 256 MiB"],
        ),
        "tmp_fill": (
            with_extra_cell(
                good,
                "let block = vec![7u8; 1 << 20];\nfor i in 0..100_000 {\n"
                '    if std::fs::write(format!("fill-{i}"), &block).is_err() { break; }\n}',
            ),
            FULL,
            [],
        ),
        # reaching what a submission must not: the network, secrets, the solutions, other
        # submissions, the grade store (each probe panics, so the task would lose its points)
        "snooping": (
            with_solution(
                good,
                "scale",
                f'    if std::net::TcpStream::connect("127.0.0.1:{port}").is_ok() '
                '{ panic!("the network is reachable") }\n'
                '    if let Ok(s) = std::fs::read_to_string("/etc/shadow") { panic!("{s}") }\n'
                '    if std::env::vars().any(|(k, v)| k.contains("CANARY") || v.contains("canary-secret")) '
                '{ panic!("the grader\'s environment leaked") }\n'
                + "".join(
                    f'    if std::fs::read_to_string("{path}").is_ok() {{ panic!("read {what}") }}\n'
                    for path, what in (
                        (SOURCE, "the solutions"),
                        (others, "another submission"),
                        (paths["planted"], "the grade store"),
                    )
                )
                + SCALE,
            ),
            FULL,
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
        "long_line": (with_extra_cell(good, 'println!("{}", "x".repeat(64 << 20));'), FULL, []),
        # repairs
        "modified_tests": (
            edit_cell(unsolved, "test_scale", lambda c: {**c, "source": "// tests? what tests"}),
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
        # identity: names as given, one row each
        "jo smith": (good, FULL, []),
        "jo_smith": (unsolved, 0, []),
    }


def write_batch(root: Path, paths: dict) -> dict:
    expected = {}
    for student, (nb, score, words) in batch(paths).items():
        dest = root / student / ASSIGNMENT / NOTEBOOK
        dest.parent.mkdir(parents=True)
        dest.write_text(nb if isinstance(nb, str) else nbformat.writes(nb))
        expected[student] = (score, words)
    # An LMS zip whose folders name another student: it is still the uploader's.
    with zipfile.ZipFile(root / "mallory_attempt1.zip", "w") as z:
        z.writestr(f"good/{ASSIGNMENT}/{NOTEBOOK}", nbformat.writes(nbformat.read(RELEASE, as_version=4)))
    expected["mallory"] = (0, [])
    return expected


ENV = {
    "COURSEKIT_CELL_TIMEOUT": str(CELL_TIMEOUT),
    "COURSEKIT_NOTEBOOK_TIMEOUT": "600",
    "COURSEKIT_DISK_LIMIT_MB": "256",
    "COURSEKIT_TEST_CANARY": "canary-secret-123",  # a secret of the instructor's shell
}


def grade(subs: Path, out: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "coursekit", "grade", str(subs), "--out", str(out), "--jobs", "2", *args],
        cwd=ROOT,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        **kw,
    )


def records(out: Path) -> dict:
    found = {}
    for p in (out / "results").glob(f"*/{ASSIGNMENT}/*.json"):
        record = json.loads(p.read_text())
        found[record["student"]] = record
    return found


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
        assert got[student]["max_score"] == FULL, student
        text = json.dumps(got[student])
        for word in words:
            assert word in text, f"{student}: the record should mention {word!r}: {text[:3000]}"


def test_attacks_on_the_grader_are_flagged_for_review(graded):
    _, out, _, _ = graded
    flags = {s: " ".join(r["flags"]) for s, r in records(out).items()}
    assert "replaces the panic hook" in flags["silent_hook"]
    assert "replaces the panic hook" in flags["silent_hook_inside"]
    assert "macro named like one of std's" in flags["fake_asserts"]
    assert "starts programs" in flags["connection_thief"]
    assert "exits the process" in flags["process_exit"]
    assert flags["good"] == "" and flags["unsolved"] == ""
    rows = {r["student"]: r for r in csv.DictReader((out / "grades.csv").open())}
    assert "replaces the panic hook" in rows["silent_hook"]["flags"]


def test_grades_csv_is_consistent_with_the_records(graded):
    _, out, expected, _ = graded
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert sorted(r["student"] for r in rows) == sorted(expected), "one row per student, names as given"
    for row in rows:
        rec = records(out)[row["student"]]
        assert float(row["score"]) == rec["score"] and float(row["max_score"]) == FULL
        assert (out / row["feedback"]).is_file(), row
    assert [r for r in rows if r["student"] == "invalid_json"][0]["status"].startswith("submission error")


def test_feedback_shows_failures_but_neither_hidden_tests_nor_secrets(graded):
    _, out, expected, _ = graded
    assert "let empty = scale" in SOURCE.read_text(), "a hidden test of the exercise"
    for student in expected:
        rec = records(out)[student]
        html = (out / "feedback" / grade_dir(student) / ASSIGNMENT / "01_values_moves_clone.html").read_text()
        assert "<html" in html.lower()
        assert "let empty = scale" not in html, f"{student}: hidden tests in the feedback"
        for secret in ("FOUND KEY in /", "root:", "canary-secret-123"):  # as output, not source
            assert secret not in html and secret not in json.dumps(rec), (student, secret)
    thief = (out / "feedback" / "connection_thief" / ASSIGNMENT / "01_values_moves_clone.html").read_text()
    assert "thief done" in thief, "the thief ran, and found no key"
    unsolved = (out / "feedback" / "unsolved" / ASSIGNMENT / "01_values_moves_clone.html").read_text()
    assert "Tests that failed" in unsolved and "test_scale" in unsolved and "not yet implemented" in unsolved
    leak = (out / "feedback" / "hidden_leak" / ASSIGNMENT / "01_values_moves_clone.html").read_text()
    assert "[a line of a hidden test]" in leak, "the printed test code, blotted out"
    scripted = (out / "feedback" / "script_in_output" / ASSIGNMENT / "01_values_moves_clone.html").read_text()
    assert "<b>bold_2</b>" in scripted and "<script>window.pwned_4" not in scripted, "HTML, no script"
    for spam in ("output_100mb", "long_line", "stderr_spam"):
        size = (out / "feedback" / spam / ASSIGNMENT / "01_values_moves_clone.html").stat().st_size
        assert size < 2 * 2**20, f"{spam}: {size} bytes of feedback"


def grade_dir(student: str) -> str:
    from coursekit.grading.grade import student_dir

    return student_dir(student)


def test_the_batch_finishes_in_bounded_time_and_leaves_nothing_running(graded):
    _, out, expected, seconds = graded
    assert seconds < 60 * len(expected), seconds
    leftover = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True).stdout.split()
    assert leftover == []
    assert not (out / ".work").exists()
    links = [p for p in Path(tempfile.gettempdir()).glob("ck-*") if p.is_symlink()]
    assert not [p for p in links if str(out) in os.readlink(p)], "runtime links left behind"


def test_rerun_grades_only_what_changed_force_regrades_all(graded):
    subs, out, expected, _ = graded
    before = {s: r["seconds"] for s, r in records(out).items()}
    changed = subs / "unsolved" / ASSIGNMENT / NOTEBOOK
    changed.write_text(nbformat.writes(solved()))
    result = grade(subs, out, timeout=1200)
    assert result.returncode == 0
    assert "graded 1 notebook(s)" in result.stdout
    after = records(out)
    assert after["unsolved"]["score"] == FULL
    assert all(after[s]["seconds"] == t for s, t in before.items() if s != "unsolved")
    only_good = subs.parent / "only_good"
    (only_good / "good" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(subs / "good" / ASSIGNMENT / NOTEBOOK, only_good / "good" / ASSIGNMENT / NOTEBOOK)
    assert "graded 0 notebook(s)" in grade(only_good, out, timeout=1200).stdout
    assert "graded 1 notebook(s)" in grade(only_good, out, "--force", timeout=1200).stdout


def test_retry_errors_regrades_only_grader_errors(graded, tmp_path):
    subs, out, _, _ = graded
    path = out / "results" / "good" / ASSIGNMENT / "01_values_moves_clone.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "status": "grader error", "score": 0}))
    only_good = tmp_path / "subs"
    (only_good / "good" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(subs / "good" / ASSIGNMENT / NOTEBOOK, only_good / "good" / ASSIGNMENT / NOTEBOOK)
    assert "graded 0 notebook(s)" in grade(only_good, out, timeout=1200).stdout
    result = grade(only_good, out, "--retry-errors", timeout=1200)
    assert "graded 1 notebook(s)" in result.stdout
    assert records(out)["good"]["score"] == FULL


def test_an_interrupted_batch_resumes(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    for student in ("a", "b"):
        dest = subs / student / ASSIGNMENT / NOTEBOOK
        dest.parent.mkdir(parents=True)
        dest.write_text(nbformat.writes(solved()))
    proc = subprocess.Popen(
        [sys.executable, "-m", "coursekit", "grade", str(subs), "--out", str(out), "--jobs", "1"],
        cwd=ROOT,
        env={**os.environ, **ENV},
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
    assert len(first) == 1
    for p in (out / "results").glob("*/*/*.json"):
        json.loads(p.read_text())  # every record on disk is whole
    result = grade(subs, out, timeout=1800)
    assert result.returncode == 0
    assert "graded 1 notebook(s)" in result.stdout
    assert {r["score"] for r in records(out).values()} == {FULL}
    links = [p for p in Path(tempfile.gettempdir()).glob("ck-*") if p.is_symlink()]
    assert not [p for p in links if str(out) in os.readlink(p)], "the killed job's runtime link is left"


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


def test_validate_and_check_agree_with_the_grader(graded, tmp_path):
    """nbgrader's Validate (the learner's button) and `coursekit check` run the tests in the
    same harness as the grader: a forged pass fails in all three."""
    subs, out, _, _ = graded
    for student, passes in (("good", True), ("fake_asserts", False)):
        nb = subs / student / ASSIGNMENT / NOTEBOOK
        copy_ = tmp_path / student / NOTEBOOK
        copy_.parent.mkdir()
        shutil.copy(nb, copy_)
        validate = subprocess.run(
            [str(Path(sys.executable).parent / "nbgrader"), "validate", str(copy_)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert ("Success! Your notebook passes all the tests." in validate.stdout) == passes, validate.stdout[
            -2000:
        ]
        check = subprocess.run(
            [sys.executable, "-m", "coursekit", "check", str(nb)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "COURSEKIT_STATE": str(tmp_path / f"{student}.json")},
        )
        assert (check.returncode == 0) == passes, check.stdout
        assert (records(out)[student]["score"] == FULL) == passes
