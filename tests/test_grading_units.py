"""The grader's pieces without a kernel (quick tier): who a submission belongs to, the test
harness's wrapping and judging, review flags, disk accounting, the sandbox's environment
and user, and cgroup v2 set-up (issue: grading never lies)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import zipfile
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, kernels_on_a_taken_port
from coursekit.grading import grade, harness, sandbox, submission
from coursekit.setup import slots

ASSIGNMENTS = ["01_rust", "02_tensors"]
NB = "01_values_moves_clone.ipynb"
RELEASE = ROOT / "exercises" / "01_rust" / NB


def _notebook(path: Path, text: str = "{}") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_corrupt_zip_is_an_invalid_notebook_not_the_end_of_the_batch(tmp_path):
    good = nbformat.writes(nbformat.read(RELEASE, as_version=4)).encode()
    with zipfile.ZipFile(tmp_path / "dan.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"a/{NB}", good)
    raw = bytearray((tmp_path / "dan.zip").read_bytes())
    start = raw.index(b"PK\x03\x04") + 30 + len(f"a/{NB}")  # the entry's compressed data
    raw[start + 10 : start + 60] = bytes(range(50))
    (tmp_path / "dan.zip").write_bytes(raw)
    with pytest.raises(Exception) as err, zipfile.ZipFile(tmp_path / "dan.zip") as z:
        z.read(f"a/{NB}")
    assert not isinstance(err.value, (zipfile.BadZipFile, OSError, RuntimeError)), "a new kind of error"
    found, _ = grade.discover(tmp_path, tmp_path / ".unzipped", ASSIGNMENTS)
    assert [(s.student, s.notebook) for s in found] == [("dan", NB)]
    with pytest.raises(submission.InvalidSubmission):
        submission.read(found[0].path)


def test_a_zip_belongs_to_its_uploader_whatever_its_folders_say(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    with zipfile.ZipFile(subs / "mallory_attempt_2.zip", "w") as z:
        z.writestr(f"victim/01_rust/{NB}", "{}")
        z.writestr(f"__MACOSX/victim/01_rust/._{NB}", "junk")
    found, ignored = grade.discover(subs, tmp_path / "unzipped", ASSIGNMENTS)
    assert [(s.student, s.assignment, s.notebook) for s in found] == [("mallory", "01_rust", NB)]
    assert ignored == []


def test_names_that_sanitise_alike_stay_two_students(tmp_path):
    for name in ("jo smith", "jo_smith", "Jo/Smith"[:2]):
        _notebook(tmp_path / name / "01_rust" / NB)
    found, _ = grade.discover(tmp_path, tmp_path / ".unzipped", ASSIGNMENTS)
    names = sorted(s.student for s in found)
    assert names == ["Jo", "jo smith", "jo_smith"]
    dirs = {grade.student_dir(n) for n in names}
    assert len(dirs) == 3 and "jo_smith" in dirs
    assert grade.student_dir("../etc") != "etc" and "/" not in grade.student_dir("../etc")


def test_two_inputs_for_one_notebook_stop_the_batch_naming_both(tmp_path):
    _notebook(tmp_path / "ann" / "01_rust" / NB)
    with zipfile.ZipFile(tmp_path / "ann.zip", "w") as z:
        z.writestr(NB, "{}")
    with pytest.raises(grade.InputError) as err:
        grade.discover(tmp_path, tmp_path / ".unzipped", ASSIGNMENTS)
    assert f"ann.zip:{NB}" in str(err.value) and f"ann/01_rust/{NB}" in str(err.value)


def test_a_second_grader_into_the_same_folder_stops_and_leaves_the_first_ones_jobs(tmp_path):
    src, out = tmp_path / "subs", tmp_path / "out"
    src.mkdir()
    running = out / ".work" / "job-0123456789ab"  # the first grader's job
    running.mkdir(parents=True)
    first = slots.lock_file(out / ".grading.lock", wait=False)
    try:
        with pytest.raises(grade.InputError, match="another `coursekit grade` is writing to"):
            grade.grade(src, out, settings=grade.Settings(sandboxed=False), progress=False)
        assert running.is_dir()
    finally:
        os.close(first)
    assert grade.grade(src, out, settings=grade.Settings(sandboxed=False), progress=False) == []
    assert not running.exists(), "once the first grader is gone, what it left is cleaned up"


def test_two_copies_in_one_zip_grade_neither_and_say_why(tmp_path):
    with zipfile.ZipFile(tmp_path / "bob.zip", "w") as z:
        z.writestr(f"a/{NB}", "{}")
        z.writestr(f"b/{NB}", "{}")
    found, _ = grade.discover(tmp_path, tmp_path / ".unzipped", ASSIGNMENTS)
    assert len(found) == 1
    assert "2 notebooks named" in found[0].problem and f"a/{NB}" in found[0].problem


def test_zip_names_follow_the_configured_pattern(tmp_path):
    with zipfile.ZipFile(tmp_path / "12345-carol-attempt.zip", "w") as z:
        z.writestr(NB, "{}")
    with pytest.raises(grade.InputError, match="does not match the zip pattern"):
        grade.discover(tmp_path, tmp_path / ".unzipped", ASSIGNMENTS, r"(?P<student>[a-z]+)\.zip")
    found, _ = grade.discover(
        tmp_path, tmp_path / ".unzipped", ASSIGNMENTS, r"\d+-(?P<student>[a-z]+)-.*\.zip"
    )
    assert found[0].student == "carol"


def test_misplaced_notebooks_are_reported(tmp_path):
    _notebook(tmp_path / "dave" / NB)
    found, ignored = grade.discover(tmp_path, tmp_path / ".unzipped", ASSIGNMENTS)
    assert found == [] and ignored == [f"dave/{NB}"]


def test_armed_test_keeps_its_line_numbers_and_carries_the_helpers():
    source = "let x = f(1);\n::core::assert_eq!(x, 2);\n// BEGIN HIDDEN TESTS\n::core::assert!(f(0) == 1);"
    armed = harness.arm(source, "n0nce", "test_f", "fn helper() {}")
    lines = armed.split("\n")
    assert lines[0].startswith('{::coursekit_prelude::grading::test("n0nce", "test_f"')
    assert lines[0].endswith("let x = f(1);") and lines[1] == "::core::assert_eq!(x, 2);"
    assert lines[2].startswith("::coursekit_prelude::grading::hidden();")
    assert "fn helper() {}" in armed and armed.endswith("});};")


def _judged(outputs: list[dict], nonce: str = "right") -> list:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(
        "x", metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 1}}
    )
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    nb.cells = [cell]
    harness.GradedExecute()._judge(nb, {0: ("x", nonce)})
    return nb.cells[0].outputs


PROOF = {"output_type": "display_data", "metadata": {}, "data": {harness.PASS_MIME: '{"nonce": "right"}'}}


def test_a_test_passes_only_with_this_runs_proof_and_no_error():
    assert _judged([PROOF]) == []
    forged = {**PROOF, "data": {harness.PASS_MIME: '{"nonce": "guess"}'}}
    assert _judged([forged])[0]["ename"] == "TestNotCompleted"
    assert _judged([])[0]["ename"] == "TestNotCompleted"
    error = {"output_type": "error", "ename": "RustPanic", "evalue": "boom", "traceback": []}
    shown = {"output_type": "display_data", "metadata": {}, "data": {"text/html": "<b>1</b>"}}
    judged = _judged([PROOF, shown, error])
    assert judged[0]["ename"] == "RustPanic", "the error goes first: nbgrader scores by the first output"
    assert judged[1:] == [shown]
    # A test cell makes no result (its code ends with `;`): one was forged with evcxr's
    # markers, and nbgrader would read its text as a partial score.
    result = {"output_type": "execute_result", "execution_count": 1, "metadata": {}}
    result["data"] = {"text/plain": "1.0"}
    assert [o["ename"] for o in _judged([PROOF, result])] == ["ForgedOutput"]
    stderr = {"output_type": "stream", "name": "stderr", "text": "debug print\n"}
    assert _judged([stderr, PROOF]) == [{"output_type": "stream", "name": "stdout", "text": "debug print\n"}]


def test_output_that_imitates_evcxrs_markers_fails_its_cell():
    """The prelude writes each content block's body on one line: evcxr's markers inside a
    block, or in its MIME type, come from a cell's code (a forged block that swallows the
    prelude's panic report, say)."""
    from coursekit.kernel.outputs import CellOutputs

    for data in (
        {"x/swallow": "EVCXR_BEGIN_CONTENT application/x-coursekit-panic\nthread 'main' panicked"},
        {"xEVCXR_BEGIN_CONTENT": "thread 'main' panicked"},
        {"text/plain": "EVCXR_END_CONTENT"},
    ):
        cell = CellOutputs()
        assert cell.translate("execute_result", {"data": data, "metadata": {}}) == []
        assert cell.outcome("ok", False)["ename"] == "ForgedOutput"
    cell = CellOutputs()
    assert cell.translate("execute_result", {"data": {"text/html": "<b>EVCXR</b>"}, "metadata": {}})
    assert cell.outcome("ok", False) is None


def test_evcxr_commands_in_a_students_cells_are_not_run():
    """`:dep coursekit_prelude = { path = ... }` would put a crate of the student's in the
    place of the prelude whose harness reports the tests' results."""
    released = nbformat.read(RELEASE, as_version=4)
    nb = nbformat.read(RELEASE, as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = ':dep coursekit_prelude = { path = "/tmp/p" }\n' + answer.source
    dep = '\n// mine\n  :dep coursekit_prelude = { path = "/tmp/p" }\r\n!cp -r /x /tmp/p\nlet a = 1;\n:vars'
    nb.cells.append(nbformat.v4.new_code_cell(dep))
    repaired, notes = submission.repair(nb, released)
    sources = [c.source for c in repaired.cells]
    assert not any(":dep" in s or "!cp" in s for s in sources)
    assert "\n// mine\n\n\nlet a = 1;\n:vars" in sources, "only the leading commands, line numbers kept"
    assert sum("evcxr commands" in n for n in notes) == 2, notes
    assert "writes evcxr commands" in " ".join(submission.review_flags(nb, released))
    assert submission.without_commands("let b = 2;\n:dep x") == ("let b = 2;\n:dep x", [])
    # evcxr reads a leading `::path` line as a command too (tests/test_structure.py keeps it
    # out of test cells); so does this
    assert submission.without_commands("::std::mem::drop(1);")[1] == ["::std::mem::drop(1);"]


def test_review_flags_take_time_in_proportion_to_the_code_never_its_square():
    """The flags are read in the grader's own process, before any sandbox or limit: a pattern
    that backtracks over a long cell would stop the whole batch (1 MB of `impl `: hours)."""
    code = (
        "import nbformat, time\n"
        "from coursekit.grading import submission\n"
        "released = nbformat.v4.new_notebook()\n"
        "for text in ('impl ' * 200_000, 'kernel-' * 150_000, 'PartialEq<' * 100_000):\n"
        "    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(text)])\n"
        "    submission.review_flags(nb, released)\n"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120, check=True)


def test_review_flags_name_what_looks_like_an_attack():
    released = nbformat.read(RELEASE, as_version=4)
    nb = nbformat.read(RELEASE, as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = answer.source.replace("todo!()", "std::panic::set_hook(Box::new(|_| {}));\n    todo!()")
    nb.cells.append(nbformat.v4.new_code_cell("struct Tensor;\nmacro_rules! assert_eq { () => {} }"))
    flags = " | ".join(submission.review_flags(nb, released))
    assert "replaces the panic hook" in flags
    assert "macro named like one of std's" in flags
    assert "redefines `Tensor`, which a locked cell of the exercise defines" in flags
    answer.source = answer.source.replace("fn scale(", "fn scale_changed(")
    assert "changes the code the exercise gave" in " ".join(submission.review_flags(nb, released))
    assert submission.review_flags(released, released) == []


def test_repair_rebuilds_metadata_and_drops_the_students_python():
    released = nbformat.read(RELEASE, as_version=4)
    nb = nbformat.read(RELEASE, as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.metadata["nbgrader"].update(grade=True, points=10)
    nb.cells.append(nbformat.v4.new_code_cell("%%python\nprint('mine')"))
    repaired, notes = submission.repair(nb, released)
    assert not any("print('mine')" in c.source for c in repaired.cells)
    gid = answer.metadata.nbgrader.grade_id
    fixed = next(c for c in repaired.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid)
    assert fixed.metadata.nbgrader.get("points") is None and not fixed.metadata.nbgrader.get("grade")
    assert any("metadata" in n for n in notes) and any("%%python" in n for n in notes)


def test_disk_use_counts_each_file_once_hard_links_included(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100_000)
    before = slots.size(tmp_path)
    for i in range(5):
        os.link(tmp_path / "a", tmp_path / f"link{i}")
    assert slots.size(tmp_path) == before >= 100_000
    (tmp_path / "b").write_bytes(b"y" * 100_000)
    assert slots.size(tmp_path) >= 200_000
    before = slots.size(tmp_path)
    for i in range(100):  # empty files and directories cost inodes, if no blocks
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "empty").touch()
    assert slots.size(tmp_path) >= before + 200 * slots.ENTRY_BYTES


def test_a_job_shares_the_templates_big_artefacts_but_not_its_past_cells(tmp_path):
    """The warm step leaves its own cells' libraries in the template (libcode_N.so); a job's
    evcxr renames its cells onto those names, which must not be read-only mounts (EBUSY)."""
    deps = tmp_path / "template" / "target" / "debug" / "deps"
    deps.mkdir(parents=True)
    big = b"x" * (sandbox.BIG_FILE + 1)
    for name in ("libburn-0123.rlib", "libcode_5.so", "libctx.so"):
        (deps / name).write_bytes(big)
    (deps / "burn-0123.d").write_text("small")
    job = sandbox.Job.create(tmp_path / "job", tmp_path / "template", sandbox.Limits())
    try:
        sandbox.clone_template(job)
        copied = job.slot / "target" / "debug" / "deps"
        assert job.readonly_files.read_text().split() == ["target/debug/deps/libburn-0123.rlib"]
        assert (copied / "libctx.so").stat().st_size == len(big)
        assert (copied / "burn-0123.d").read_text() == "small"
        assert not (copied / "libcode_5.so").exists()
    finally:
        job.remove()


def _use_template(change: bool) -> tuple[threading.Event, threading.Event]:
    """A thread holding the template as a job (or a change) does: (it holds it, let it go)."""
    held, done = threading.Event(), threading.Event()

    def run():
        with grade.template_in_use(change):
            held.set()
            done.wait(30)

    threading.Thread(target=run, daemon=True).start()
    return held, done


def test_the_template_changes_only_when_no_job_uses_it_and_new_jobs_wait_for_the_change(
    tmp_path, monkeypatch
):
    """A grader warming the sandboxes' build directory while another grader's job copied it
    made the copy fail, or the job's kernel die at its start (a mounted file was gone)."""
    monkeypatch.setenv("COURSEKIT_POOL", str(tmp_path))
    (a, release_a), (b, release_b) = _use_template(False), _use_template(False)
    assert a.wait(5) and b.wait(5), "jobs share the template"
    change, release_change = _use_template(True)
    assert not change.wait(0.5), "a change waits for the running jobs"
    late, release_late = _use_template(False)
    assert not late.wait(0.5), "a job that comes while a change waits waits for the change"
    release_a.set()
    assert not change.wait(0.5)
    release_b.set()
    assert change.wait(5)
    assert not late.wait(0.5), "no job while the template changes"
    release_change.set()
    assert late.wait(5)
    release_late.set()


def test_the_template_is_changed_only_when_the_prelude_was_built_from_other_sources(tmp_path, monkeypatch):
    from coursekit.setup import prewarm

    monkeypatch.setenv("COURSEKIT_POOL", str(tmp_path / "pool"))
    (tmp_path / "pool" / f"slot-{grade.GRADE_SLOT}").mkdir(parents=True)
    prelude = tmp_path / "prelude"
    shutil.copytree(prewarm.PRELUDE, prelude, ignore=shutil.ignore_patterns("target"))
    monkeypatch.setattr(prewarm, "PRELUDE", prelude)
    monkeypatch.setattr(prewarm, "is_warm", lambda slot, framework: True)
    kernels = []
    monkeypatch.setattr(prewarm, "run_cells", lambda cells, slot: kernels.append(slot))
    grade.ensure_template_slot({"01_rust"})
    assert kernels == [grade.GRADE_SLOT], "a kernel builds the prelude the first time"
    grade.ensure_template_slot({"01_rust"})
    assert len(kernels) == 1, "nothing changed: no kernel, the template is left alone"
    source = next(p for p in prelude.rglob("*.rs"))
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    grade.ensure_template_slot({"01_rust"})
    assert len(kernels) == 2, "a newer source (a fresh clone, an edit) is built again"
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    warmed = set()
    monkeypatch.setattr(prewarm, "is_warm", lambda slot, framework: framework in warmed)

    def warm(slot, framework):
        warmed.add(framework)
        kernels.append(slot)

    monkeypatch.setattr(prewarm, "warm", warm)
    grade.ensure_template_slot({"02_tensors"})
    assert len(kernels) == 2 + len(warmed) and warmed, "a framework's warm-up builds the prelude too"
    grade.ensure_template_slot({"02_tensors"})
    assert len(kernels) == 2 + len(warmed), "then nothing is left to do"


def test_the_sandbox_gets_an_allow_list_of_variables_and_an_unprivileged_user(tmp_path, monkeypatch):
    job = sandbox.Job.create(tmp_path / "job", None, sandbox.Limits())
    try:
        env = {"PATH": "/usr/bin", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "RUST_SRC_PATH": "/x", "HOME": "/root"}
        inner = sandbox.sandbox_env(env, job)
        assert (
            "AWS_SECRET_ACCESS_KEY" not in inner
            and inner["RUST_SRC_PATH"] == "/x"
            and inner["HOME"] != "/root"
        )
        sandbox.clone_template(job)
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        uid = sandbox.JOB_UID_BASE + 42
        argv = sandbox.bwrap_argv(job, ["kernel"], env, uid)
        assert "--clearenv" in argv and "s3cr3t" not in argv
        assert argv[argv.index("setpriv") :][:2] == ["setpriv", f"--reuid={uid}"], (
            "root becomes the job's user"
        )
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        argv = sandbox.bwrap_argv(job, ["kernel"], env)
        assert "setpriv" not in argv and "--unshare-all" in argv and "--cap-drop" in argv
    finally:
        job.remove()


def test_cgroup_v2_controllers_are_enabled_down_to_the_job(tmp_path, monkeypatch):
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("cpu\n")
    monkeypatch.setattr(sandbox, "CGROUP", root)
    real_mkdir = Path.mkdir

    def mkdir(self, *a, **kw):  # the kernel makes a cgroup's files; so does this fake
        real_mkdir(self, *a, **kw)
        for name in ("cgroup.subtree_control", "memory.max", "pids.max", "cgroup.procs"):
            if not (self / name).exists():
                (self / name).write_text("")

    monkeypatch.setattr(Path, "mkdir", mkdir)
    dirs = sandbox._cgroup_dirs("job-1")
    assert dirs == [root / "coursekit" / "job-1"]
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (root / "coursekit" / "cgroup.subtree_control").read_text() == "+memory +pids"


def test_feedback_shows_the_students_own_error_before_the_failed_tests(tmp_path):
    """The feedback banner names the answer cell that did not compile, with rustc's report,
    ahead of the tests it made fail."""
    sub = grade.Submission("ann", "01_rust", "01_values_moves_clone.ipynb", tmp_path / "x.ipynb")
    record = grade.Record("ann", "01_rust", "01_values_moves_clone.ipynb", "k", max_score=2)
    record.tasks = {"test_scale": [0.0, 2.0, "CompileError: cannot find function `scale`"]}
    record.answers = {"scale": "CompileError: mismatched types\n[E0308] line 3 of your cell <&str>"}
    grade._feedback(record, None, sub, tmp_path, grade.Settings())
    html = (tmp_path / "ann" / "01_rust" / "01_values_moves_clone.html").read_text()
    own, failed = html.index("mismatched types"), html.index("cannot find function")
    assert own < failed and "line 3 of your cell &lt;&amp;str&gt;" in html


def test_checks_reuse_a_released_template_until_what_it_is_made_of_changes(tmp_path, monkeypatch):
    """`coursekit check` keeps nbgrader's template between runs (one nbgrader process less
    per check), under a key of the exercise's source, the config and the grader."""
    source = tmp_path / "source.ipynb"
    source.write_text("one")
    monkeypatch.setattr(grade, "source_path", lambda assignment, notebook: source)
    made = []

    def generate(self, assignment, notebook):
        d = self.workdir / f"generated-{len(made)}"
        d.mkdir(parents=True)
        (d / "gradebook.db").write_text(source.read_text())
        made.append(d)
        return d

    monkeypatch.setattr(grade.Templates, "_generate", generate)
    cache = tmp_path / "cache"
    first = grade.Templates(tmp_path / "run1", cache=cache).get("01_rust", NB)
    again = grade.Templates(tmp_path / "run2", cache=cache).get("01_rust", NB)
    assert first == again and first.parent == cache and len(made) == 1
    source.write_text("two")  # the instructor changed the exercise
    changed = grade.Templates(tmp_path / "run3", cache=cache).get("01_rust", NB)
    assert changed != first and (changed / "gradebook.db").read_text() == "two" and len(made) == 2
    assert sorted(p.name for p in cache.iterdir()) == sorted([first.name, changed.name]), "no leftovers"
    batch = grade.Templates(tmp_path / "run4").get("01_rust", NB)  # grading: nothing kept
    assert batch.parent == tmp_path / "run4" and len(made) == 3


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "command"])
def test_nbgrader_runs_in_its_course_and_is_killed_with_what_it_started(tmp_path, monkeypatch, forked):
    """Both ways of running nbgrader (forked from the preloaded server, or the `nbgrader`
    command where a Dask worker may not fork): the course's configuration and the job's
    environment apply, output and exit status come back, and at the backstop timeout nbgrader
    is killed together with the processes it started."""
    if not forked:
        monkeypatch.setattr(grade.nbgrader_server, "forkable", lambda: False)
    (tmp_path / "nbgrader_config.py").write_text(
        "import os, subprocess, time\n"
        "print('config read with', os.environ['COURSEKIT_TEST_VALUE'], flush=True)\n"
        "if os.environ['COURSEKIT_TEST_VALUE'] == 'hang':\n"
        "    open('child.pid', 'w').write(str(subprocess.Popen(['sleep', '600']).pid))\n"
        "    time.sleep(600)\n"
    )
    ran = grade.run_nbgrader(tmp_path, ["db", "student", "list"], {"COURSEKIT_TEST_VALUE": "ok"}, timeout=120)
    assert ran.returncode == 0, ran.stdout
    assert "config read with ok" in ran.stdout
    stuck = grade.run_nbgrader(
        tmp_path, ["db", "student", "list"], {"COURSEKIT_TEST_VALUE": "hang"}, timeout=8
    )
    assert stuck.returncode == -9 and "timed out after 8 s" in stuck.stdout
    child = int((tmp_path / "child.pid").read_text())
    psutil = pytest.importorskip("psutil")
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(child).wait(timeout=10)  # reaped by whoever adopted it
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_kernel_that_could_not_start_is_the_graders_error_not_a_zero():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("fn f() {}"), nbformat.v4.new_code_cell("f()")]
    nb.cells[1].outputs = [
        nbformat.v4.new_output("error", ename="RustPanic", evalue="assertion failed", traceback=[])
    ]
    assert grade.kernel_unavailable(nb) is None  # the submission's own failure
    nb.cells[1].outputs[0].evalue = "the Rust kernel is unavailable: says the student's panic"
    assert grade.kernel_unavailable(nb) is None, "a submission cannot pass its failure off as ours"
    nb.cells[1].outputs[0].ename = "RustError"  # `Err("the Rust kernel is unavailable: ...")?`
    assert grade.kernel_unavailable(nb) is None, "nor an error it returned"
    nb.cells[1].outputs = []
    nb.cells[0].outputs = [
        nbformat.v4.new_output(
            "error",
            ename="KernelUnavailable",
            evalue="the Rust kernel is unavailable: Kernel died before replying to kernel_info",
            traceback=[],
        )
    ]
    assert "Kernel died before replying" in grade.kernel_unavailable(nb)
    nb.cells[0].outputs = []
    harness.GradedExecute._unavailable(nb, "Kernel died before replying to kernel_info (3 tries)")
    assert "Kernel died before replying" in grade.kernel_unavailable(nb), "no kernel at all: ours too"
    assert all(o.ename == "NotRun" for o in nb.cells[1].outputs)


def test_nbgrader_is_forked_only_where_the_main_module_is_not_run_again(monkeypatch):
    """multiprocessing imports a script's `__main__` again in each child (its top level would
    grade again): a script gets the `nbgrader` command, `python -m` and interactive use fork."""
    import types

    script = types.ModuleType("__main__")
    script.__file__, script.__spec__ = "/home/teacher/grade_all.py", None
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert not grade.nbgrader_server.forkable()
    script.__spec__ = types.SimpleNamespace(name="coursekit.__main__")
    assert grade.nbgrader_server.forkable()
    del script.__file__
    script.__spec__ = None
    assert grade.nbgrader_server.forkable()


def test_a_kernel_whose_port_was_taken_is_started_again_on_fresh_ports(port_taken_first):
    """Jupyter picks a kernel's TCP ports free, then the kernel binds them: a process that
    takes one meanwhile kills the kernel at start (`Address already in use`, seen once in a
    whole test run). The grader starts it again instead of failing the notebook."""
    manager_class, managers = port_taken_first
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("print(6 * 7)")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    ex = harness.GradedExecute(kernel_manager_class=manager_class, kernel_name="python3")
    ex.preprocess(nb, {"metadata": {"path": str(ROOT)}})
    assert len(managers) == 2
    assert nb.cells[0].outputs[0]["text"] == "42\n"


def test_a_kernel_that_never_starts_is_the_graders_error_before_any_cell_runs():
    """A kernel that dies before its first reply at every try (the sandbox could not mount the
    template, say) has run nothing of the submission: the grader's fault, not a zero."""
    from coursekit.kernel.session import KERNEL_TRIES

    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("print(6 * 7)"), nbformat.v4.new_code_cell("print(1)")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    with kernels_on_a_taken_port(KERNEL_TRIES) as (manager_class, managers):
        ex = harness.GradedExecute(kernel_manager_class=manager_class, kernel_name="python3")
        ex.preprocess(nb, {"metadata": {"path": str(ROOT)}})
    assert len(managers) == KERNEL_TRIES
    assert "Kernel died before replying" in grade.kernel_unavailable(nb)
    assert [o.ename for o in nb.cells[1].outputs] == ["NotRun"]
