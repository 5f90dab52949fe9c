"""The rust-pytorch kernel over the Jupyter protocol (issue: the Rust + PyTorch kernel)."""

from __future__ import annotations

import base64
import contextlib
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import KernelSession

pytestmark = pytest.mark.full


def errors(outputs):
    return [c for t, c in outputs if t == "error"]


def streams(outputs):
    return [(c["name"], c["text"]) for t, c in outputs if t == "stream"]


def test_rust_cell_value_and_python_cell(kernel):
    reply, outputs = kernel.run('let answer = 40 + 2;\nprintln!("answer = {answer}");\nanswer')
    assert reply["status"] == "ok"
    assert streams(outputs) == [("stdout", "answer = 42\n")]
    assert [c["data"]["text/plain"] for t, c in outputs if t == "execute_result"] == ["42"]
    assert kernel.stdout("%%python\nprint(sum([1, 2, 3]))") == "6\n"


def test_execution_counts_increase_across_languages(kernel):
    counts = [kernel.run(code)[0]["execution_count"] for code in ("1 + 1", "%%python\n1", "2 + 2")]
    assert counts[1] == counts[0] + 1 and counts[2] == counts[1] + 1


def test_interleaved_outputs_arrive_in_order(kernel):
    code = """
for i in 0..20 {
    println!("out {i}");
    eprintln!("err {i}");
    display_html(&format!("<i>{i}</i>"));
}"""
    reply, outputs = kernel.run(code)
    assert reply["status"] == "ok"
    seen = []
    for t, c in outputs:
        if t == "stream":
            seen += [f"{c['name']}:{line}" for line in c["text"].splitlines()]
        elif t == "display_data":
            seen.append("html:" + c["data"]["text/html"])
    expected = []
    for i in range(20):
        expected += [f"stdout:out {i}", f"stderr:err {i}", f"html:<i>{i}</i>"]
    assert seen == expected


def test_images_and_svg(kernel):
    png = bytes([137, 80, 78, 71, 13, 10, 26, 10, 0, 1, 2, 3, 254, 255])
    reply, outputs = kernel.run(f'display_png(&{list(png)}); display_svg("<svg></svg>");')
    data = [c["data"] for t, c in outputs if t == "display_data"]
    assert base64.b64decode(data[0]["image/png"]) == png
    assert data[1] == {"image/svg+xml": "<svg></svg>"}


def test_compile_error_is_an_error_with_ename(kernel):
    reply, outputs = kernel.run('let n: i32 = "text";')
    assert reply["status"] == "error"
    assert reply["ename"] == "CompileError" and "mismatched types" in reply["evalue"]
    (err,) = errors(outputs)
    assert err["ename"] == "CompileError" and any("mismatched types" in line for line in err["traceback"])


def test_panic_is_an_error_and_keeps_variables(kernel):
    kernel.run("let kept = vec![1, 2, 3];")
    reply, outputs = kernel.run('let fresh = 1; panic!("tensor shape mismatch: {} vs {}", 2, 3);')
    assert reply["status"] == "error" and reply["ename"] == "RustPanic"
    assert reply["evalue"] == "tensor shape mismatch: 2 vs 3"
    assert errors(outputs)[-1]["ename"] == "RustPanic"
    assert "stack backtrace" not in "".join(text for _, text in streams(outputs))
    assert_reported_in_order(outputs, "tensor shape mismatch: 2 vs 3")
    assert kernel.stdout('println!("{:?}", kept);') == "[1, 2, 3]\n"


def assert_reported_in_order(outputs, message):
    """The panic's report is one stderr message before the error: the prelude's panic hook
    sent it through evcxr's content channel, not stderr (whose lines can come late)."""
    (report,) = [text for name, text in streams(outputs) if "panicked at" in text]
    header = r"thread '<unnamed>' panicked at src/lib\.rs:\d+:\d+:\n"
    assert re.fullmatch(header + re.escape(message) + "\n", report)
    assert outputs[-1][0] == "error"


def test_failed_assert_in_a_test_cell_is_an_error(kernel):
    reply, _ = kernel.run('assert_eq!(1 + 1, 3, "arithmetic");')
    assert reply["ename"] == "RustPanic" and "arithmetic" in reply["evalue"]


def test_question_mark_error_is_an_error(kernel):
    reply, outputs = kernel.run('let v: i32 = "x".parse()?;')
    assert reply["status"] == "error", outputs
    assert "invalid digit" in reply["evalue"]


def test_a_learners_own_eprintln_of_an_error_is_not_the_cells_error(kernel):
    reply, outputs = kernel.run(
        'let r: Result<i32, String> = Err("bad input".to_string());\n'
        'match r { Ok(v) => println!("{v}"), Err(error) => eprintln!("{}", error) }'
    )
    assert reply["status"] == "ok", outputs
    assert ("stderr", "bad input\n") in streams(outputs)


def test_shares_arrive_under_cpu_load(kernel):
    """share() travels with the cell's result, not on stdout, so none is late or lost."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        reply, _ = kernel.run('for i in 0..40 { share(&format!("v{i}"), &i); }\nshare("last one", &"done");')
        assert reply["status"] == "ok"
        out = kernel.stdout(
            "%%python\nprint([rust[f'v{i}'] for i in range(40)] == list(range(40)), rust['last one'])"
        )
    finally:
        for b in burners:
            b.kill()
    assert out == "True done\n"


def test_every_printed_line_arrives_before_the_cell_ends_under_cpu_load(kernel):
    """evcxr relays stdout from another thread; the kernel waits for the cell's last line
    (named by content that comes before the reply) instead of a fixed grace."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        runs = [
            kernel.run(f'for i in 0..30 {{ println!("line {{i}}"); }}\nprint!("end {n}")') for n in range(15)
        ]
    finally:
        for b in burners:
            b.kill()
    for n, (reply, outputs) in enumerate(runs):
        assert reply["status"] == "ok"
        text = "".join(c["text"] for t, c in outputs if t == "stream")
        assert text == "".join(f"line {i}\n" for i in range(30)) + f"end {n}"


def test_print_macros_and_evcxr_display_keep_their_behaviour(kernel):
    """print!/println! go through the prelude; evcxr's own protocol lines (a type's
    `evcxr_display`) still reach evcxr."""
    reply, outputs = kernel.run(
        'let x = 7;\nprint!("a");\nprint!("b\\n");\nprintln!();\nprintln!("{x} {}", x + 1);'
    )
    assert reply["status"] == "ok"
    assert "".join(c["text"] for t, c in outputs if t == "stream") == "ab\n\n7 8\n"
    reply, outputs = kernel.run(
        "struct Bold;\nimpl Bold { fn evcxr_display(&self) {\n"
        '    println!("EVCXR_BEGIN_CONTENT text/html\\n<b>bold</b>\\nEVCXR_END_CONTENT");\n} }\nBold'
    )
    assert reply["status"] == "ok"
    assert [c["data"].get("text/html") for t, c in outputs if t == "execute_result"] == ["<b>bold</b>"]


def test_python_exception(kernel):
    reply, outputs = kernel.run("%%python\n{}['missing']")
    assert reply["status"] == "error" and reply["ename"] == "KeyError"
    assert errors(outputs)[0]["ename"] == "KeyError"


def test_process_exit_restarts_rust_state():
    session = KernelSession()
    try:
        session.run("fn double(x: i32) -> i32 { x * 2 }\nlet lost = 5;")
        reply, outputs = session.run("std::process::exit(3);")
        assert reply["ename"] == "RustProcessExited" and "variables were lost" in reply["evalue"]
        reply, _ = session.run("lost")
        assert reply["ename"] == "CompileError"
        assert session.stdout('println!("{}", double(21));') == "42\n"
        reply, outputs = session.run('panic!("after the restart");')
        assert reply["ename"] == "RustPanic"
        assert_reported_in_order(outputs, "after the restart")
    finally:
        session.close()


def evcxr_process(session: KernelSession) -> psutil.Process:
    kernel = psutil.Process(session.km.provisioner.pid)
    (evcxr,) = [p for p in kernel.children() if p.name().startswith("evcxr")]
    return evcxr


@pytest.mark.parametrize(
    "sig, ename, says",
    [(signal.SIGABRT, "EvcxrCrash", "stopped"), (signal.SIGKILL, "EvcxrKilled", "memory runs out")],
)
def test_evcxr_crash_restarts_the_child(sig, ename, says):
    """A crash, and a SIGKILL from outside (the kernel never sends one while a cell runs; the
    system does when memory runs out), each said as what it most likely is."""
    session = KernelSession()
    try:
        session.run("let before = 1;")
        evcxr_process(session).send_signal(sig)
        reply, _ = session.run("let after = 2;")
        assert reply["ename"] == ename and "variables were lost" in reply["evalue"], reply
        assert says in reply["evalue"]
        assert session.stdout('println!("alive");') == "alive\n"
    finally:
        session.close()


def _interrupt_latency(session: KernelSession, code: str) -> tuple[float, dict]:
    """Run `code`, which prints "looping" and loops; interrupt once it printed that."""
    msg_id = session.kc.execute(code)
    while True:  # compiled and looping, however busy the machine is
        msg = session.kc.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") == msg_id and "looping" in msg["content"].get("text", ""):
            break
    started = time.monotonic()
    session.km.interrupt_kernel()
    reply = session.reply(msg_id, timeout=30)
    latency = time.monotonic() - started
    session.wait_idle(msg_id)
    return latency, reply


def test_interrupt_stops_a_rust_loop_within_2s(kernel):
    kernel.drain_iopub()
    kernel.run("let survivor = 1;")
    latency, reply = _interrupt_latency(
        kernel, 'println!("looping");\nlet mut n = 0u64;\nloop { n = n.wrapping_add(1); }'
    )
    assert reply["ename"] == "KeyboardInterrupt"
    assert latency < 2.0, latency
    assert kernel.stdout('println!("still running");') == "still running\n"


def test_interrupt_stops_a_python_loop_within_2s(kernel):
    kernel.drain_iopub()
    code = "%%python\nprint('looping', flush=True)\nwhile True:\n    pass"
    latency, reply = _interrupt_latency(kernel, code)
    assert reply["ename"] == "KeyboardInterrupt"
    assert latency < 2.0, latency


def _descendants(session: KernelSession) -> list[psutil.Process]:
    return psutil.Process(session.km.provisioner.pid).children(recursive=True)


def _survivors(processes: list[psutil.Process], within: float = 15) -> list[psutil.Process]:
    """Those of `processes` still alive after `within` seconds (polled: a busy machine is slow)."""
    deadline = time.monotonic() + within
    while True:
        alive = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_shutdown_and_restart_leave_no_orphans():
    session = KernelSession()
    session.run("let x = 1;")
    before = _descendants(session)
    assert any(p.name().startswith("evcxr") for p in before)
    session.km.restart_kernel(now=False)
    assert _survivors(before) == []
    session.kc.wait_for_ready(timeout=120)
    session.run("let y = 2;")
    after = _descendants(session) + [psutil.Process(session.km.provisioner.pid)]
    session.close()
    assert _survivors(after) == []


def test_python_cells_do_not_wait_for_evcxr():
    session = KernelSession()
    try:
        out = session.stdout("%%python\nprint(get_ipython().kernel.rust.ready.done())")
        assert out == "False\n"  # the Python cell ran while evcxr was still starting
    finally:
        session.close()


def test_completion_in_both_languages(kernel):
    kernel.run("let learning_rate_schedule = vec![0.1f32];")
    code = "learning_rate_sch"
    reply = kernel.kc.complete(code, len(code), reply=True)["content"]
    assert "learning_rate_schedule" in reply["matches"]
    code = "%%python\nimport math\nmath.sq"
    reply = kernel.kc.complete(code, len(code), reply=True)["content"]
    assert "math.sqrt" in reply["matches"] or "sqrt" in reply["matches"]
    assert reply["cursor_end"] == len(code)


def test_inspection_in_both_languages(kernel):
    code = "%%python\nlen"
    reply = kernel.kc.inspect(code, len(code), reply=True)["content"]
    assert reply["found"] and "text/plain" in reply["data"]
    code = "let text = String::new();"
    reply = kernel.kc.inspect(code, code.index("String") + 2, reply=True)["content"]
    assert reply["status"] == "ok"


def test_values_cross_between_languages(kernel):
    kernel.run(
        "#[derive(Debug)] struct Stats { mean: f32, n: usize }\n"
        'share("losses", &vec![0.5f32, 0.25, f32::NAN]);\n'
        'share("stats", &Stats { mean: 1.5, n: 3 });\n'
        'share("label", &Some("cat"));'
    )
    out = kernel.stdout(
        "%%python\nimport math\nprint(rust.losses[:2], math.isnan(rust.losses[2]), rust.stats, rust['label'])"
    )
    assert out == "[0.5, 0.25] True {'mean': 1.5, 'n': 3} cat\n"
    kernel.run(
        '%%python\nimport numpy as np\nto_rust("weights", np.arange(6, dtype="float32").reshape(2, 3))\n'
        'to_rust("epochs", 3)\nto_rust("names", ["a", "b"])'
    )
    out = kernel.stdout('println!("{:?} {:?} {} {:?}", weights, weights_shape, epochs + 1, names);')
    assert out == '[0.0, 1.0, 2.0, 3.0, 4.0, 5.0] [2, 3] 4 ["a", "b"]\n'


def test_a_large_array_reaches_rust_exactly_and_quickly(kernel):
    """50,000 floats, the awkward ones included, arrive bit for bit (evcxr took a minute to
    read a `vec![…]` literal of half as many)."""
    kernel.run(
        "%%python\nimport numpy as np\n"
        "big = np.random.default_rng(0).standard_normal((250, 200)).astype('float32')\n"
        "big[0, :5] = [np.nan, -0.0, 1e-45, np.inf, -np.inf]\nto_rust('big', big)"
    )
    started = time.monotonic()
    out = kernel.stdout(
        "let bits: Vec<u32> = big.iter().map(|x| x.to_bits()).collect();\n"
        'share("bits", &bits);\nprintln!("{:?} {}", big_shape, big.len());'
    )
    assert out == "[250, 200] 50000\n"
    assert time.monotonic() - started < 60, "the binding and one cell took over a minute"
    same = kernel.stdout("%%python\nprint(rust.bits == big.view('uint32').ravel().tolist())")
    assert same == "True\n"


def test_matplotlib_and_torch_in_python_cells(kernel):
    reply, outputs = kernel.run(
        "%%python\nimport torch\nimport matplotlib.pyplot as plt\n"
        "t = torch.arange(4.0)\nplt.plot(t.numpy(), (t * t).numpy())\nplt.show()\nprint(float(t.sum()))"
    )
    assert reply["status"] == "ok", outputs
    assert ("stdout", "6.0\n") in streams(outputs)
    assert any("image/png" in c["data"] for t, c in outputs if t == "display_data")


def test_widget_comm_round_trip(kernel):
    kernel.drain_iopub()
    msg_id = kernel.kc.execute("%%python\nimport ipywidgets as w\nslider = w.IntSlider(value=1)\nslider")
    comm_id = None
    while comm_id is None:
        msg = kernel.kc.get_iopub_msg(timeout=30)
        if (
            msg["msg_type"] == "comm_open"
            and msg["content"]["data"]["state"].get("_model_name") == "IntSliderModel"
        ):
            comm_id = msg["content"]["comm_id"]
    kernel.reply(msg_id)
    update = kernel.kc.session.msg(
        "comm_msg",
        {"comm_id": comm_id, "data": {"method": "update", "state": {"value": 7}, "buffer_paths": []}},
    )
    kernel.kc.shell_channel.send(update)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if kernel.stdout("%%python\nprint(slider.value)") == "7\n":
            return
        time.sleep(0.2)
    pytest.fail("the widget never received the front end's update")


def test_warm_up_loads_the_notebooks_crates_in_the_background(tmp_path):
    """In JupyterLab the kernel knows its notebook (JPY_SESSION_NAME): it runs the first
    cell's :dep lines before the learner does, and nothing else."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(':dep anyhow = "=1.0.105"')])
    path = tmp_path / "lesson.ipynb"
    nbformat.write(nb, path)
    session = KernelSession(env={"JPY_SESSION_NAME": str(path)})
    try:
        assert session.stdout("%%python\nprint(get_ipython().kernel.warmed is not None)") == "True\n"
        session.stdout("%%python\nget_ipython().kernel.warmed.result(timeout=600)")
        started = time.monotonic()
        reply, _ = session.run(':dep anyhow = "=1.0.105"')
        assert reply["status"] == "ok"
        assert time.monotonic() - started < 3, "the :dep cell should find the crate already loaded"
        assert session.stdout('println!("{}", anyhow::anyhow!("loaded"));') == "loaded\n"
        assert session.run("coursekit_warm_up")[0]["ename"] == "CompileError"
    finally:
        session.close()


@pytest.mark.parametrize("python_cells", [True, False])
def test_torch_is_imported_at_the_first_cell_only_for_a_notebook_with_python_cells(tmp_path, python_cells):
    """A notebook with %%python cells (PyTorch's reference code) gets torch imported in the
    background from its first cell on; a Rust-only one never pays its memory."""
    import nbformat

    cells = [nbformat.v4.new_code_cell("let x = 1;")]
    if python_cells:
        cells.append(nbformat.v4.new_code_cell("%%python\nimport torch"))
    path = tmp_path / "lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    session = KernelSession(env={"JPY_SESSION_NAME": str(path)})
    try:
        probe = "%%python\nimport sys\nprint('torch' in sys.modules)"
        assert session.stdout(probe) == f"{python_cells}\n"
        assert session.run("let y = 2;")[0]["status"] == "ok"
        assert session.stdout(probe) == f"{python_cells}\n"
    finally:
        session.close()


def _interrupted_while_queued(session: KernelSession) -> dict:
    """Send a Rust cell that would run 30 s, interrupt it at once; its reply."""
    msg_id = session.kc.execute('std::thread::sleep(std::time::Duration::from_secs(30));\nprintln!("ran");')
    while True:  # the kernel has taken the request
        msg = session.kc.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") == msg_id and msg["content"].get("execution_state") == "busy":
            break
    time.sleep(0.2)
    session.km.interrupt_kernel()
    started = time.monotonic()
    reply = session.reply(msg_id, timeout=60)
    assert time.monotonic() - started < 5, "the interrupt was not honoured at once"
    session.wait_idle(msg_id)
    return reply


def test_interrupt_while_evcxr_starts_stops_the_cell():
    session = KernelSession()
    try:
        assert session.stdout("%%python\nprint(get_ipython().kernel.rust.ready.done())") == "False\n"
        reply = _interrupted_while_queued(session)
        assert reply["ename"] == "KeyboardInterrupt" and "before it ran" in reply["evalue"], reply
        assert session.stdout('println!("alive");') == "alive\n"
    finally:
        session.close()


def _slow_warm_up(tmp_path) -> KernelSession:
    """A kernel in JupyterLab's place for a notebook whose first cell loads a crate with a
    build script that takes 20 s: its warm-up runs that long."""
    import nbformat

    crate = tmp_path / "slow"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text('[package]\nname = "slow"\nversion = "0.1.0"\nedition = "2021"\n')
    (crate / "build.rs").write_text("fn main() { std::thread::sleep(std::time::Duration::from_secs(20)); }\n")
    (crate / "src" / "lib.rs").write_text("pub fn answer() -> u32 { 42 }\n")
    dep = f':dep slow = {{ path = "{crate}" }}'
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(dep)])
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    return KernelSession(env={"JPY_SESSION_NAME": str(tmp_path / "lesson.ipynb")})


def test_interrupt_while_the_warm_up_runs_stops_the_queued_cell(tmp_path):
    """A cell interrupted behind the warm-up never runs, and the warm-up goes on undisturbed."""
    session = _slow_warm_up(tmp_path)
    try:
        session.stdout("%%python\nget_ipython().kernel.rust.ready.result(timeout=600)")
        assert session.stdout("%%python\nprint(get_ipython().kernel.warmed.done())") == "False\n"
        reply = _interrupted_while_queued(session)
        assert reply["ename"] == "KeyboardInterrupt" and "before it ran" in reply["evalue"], reply
        session.stdout("%%python\nget_ipython().kernel.warmed.result(timeout=600)")
        assert session.stdout('println!("{}", slow::answer());') == "42\n"
    finally:
        session.close()


def test_a_cell_waiting_behind_the_warm_up_says_what_for_until_its_output_comes(tmp_path):
    """In JupyterLab, a cell queued behind the notebook's warm-up shows one waiting line
    (updated in place), cleared before the cell's own output; nbval and nbgrader never see it
    (no JPY_SESSION_NAME: every notebook's committed outputs stay as they are)."""
    session = _slow_warm_up(tmp_path)
    try:
        session.stdout("%%python\nget_ipython().kernel.rust.ready.result(timeout=600)")
        assert session.stdout("%%python\nprint(get_ipython().kernel.warmed.done())") == "False\n"
        ran = session.run('println!("{}", slow::answer());', timeout=600)
        assert ran.ok, ran.outputs
        kinds = [kind for kind, _ in ran.outputs]
        assert kinds[0] == "display_data", kinds
        waiting = ran.outputs[0][1]
        assert "waiting for this notebook's crates" in waiting["data"]["text/plain"], waiting
        shown = waiting["transient"]["display_id"]
        updates = [c for k, c in ran.outputs if k == "update_display_data"]
        assert all(c["transient"]["display_id"] == shown for c in updates)
        cleared = kinds.index("clear_output")
        assert set(kinds[1:cleared]) <= {"update_display_data"}, kinds
        assert [c["text"] for k, c in ran.outputs[cleared:] if k == "stream"] == ["42\n"], kinds
        assert "display_data" not in kinds[cleared:] and "update_display_data" not in kinds[cleared:]
        quick = session.run('println!("quick");').outputs
        assert [k for k, _ in quick] == ["stream"], "no waiting line when nothing waits"
    finally:
        session.close()


@pytest.mark.skipif(sys.platform != "linux", reason="oom_score_adj is Linux's")
@pytest.mark.parametrize("first", [True, False])
def test_a_checks_kernel_is_what_the_system_stops_first_when_memory_runs_out(first):
    """The harness starts its kernels (check, Validate, grading) with OOM_FIRST: they and the
    processes they start volunteer to the OOM killer; a learner's kernel does not."""
    from coursekit.kernel.session import OOM_FIRST

    session = KernelSession(env={OOM_FIRST: "1"} if first else {})
    try:
        assert session.stdout('println!("{}", 1);') == "1\n"  # evcxr is up
        kernel = psutil.Process(session.km.provisioner.pid)
        expected = "1000" if first else Path("/proc/self/oom_score_adj").read_text().strip()
        for process in [kernel, *kernel.children(recursive=True)]:
            assert Path(f"/proc/{process.pid}/oom_score_adj").read_text().strip() == expected, process
    finally:
        session.close()


def test_a_checks_kernel_indexes_crates_only_for_a_type_to_infer(tmp_path):
    """A check's kernel (check, Validate, grading) tells evcxr EVCXR_LAZY_ANALYSIS
    (evcxr.patch): its rust-analyzer loads no crate graph, not even the standard library's,
    while the cells' variables declare their types, as the harness's tests do, and its
    warm-up (`watch` starts one ahead) only loads the crates; the first variable whose type
    must be inferred loads the graph. Variables persist either way. A learner's kernel
    indexes at once (the first cell's variable needs it anyway)."""
    import nbformat

    from coursekit.kernel.session import OOM_FIRST, WARM_UP

    def evcxr_mib(session) -> int:
        kernel = psutil.Process(session.km.provisioner.pid)
        evcxr = [p for p in kernel.children(recursive=True) if p.name() == "evcxr_jupyter"]
        return max(p.memory_info().rss for p in evcxr) >> 20

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(':dep anyhow = "=1.0.105"')])
    nbformat.write(nb, tmp_path / "exercise.ipynb")
    check = KernelSession(env={OOM_FIRST: "1", WARM_UP: str(tmp_path / "exercise.ipynb")})
    learner = KernelSession()
    try:
        check.stdout("%%python\nget_ipython().kernel.warmed.result(timeout=600)")
        assert check.stdout('println!("{}", anyhow::anyhow!("loaded"));') == "loaded\n"
        for session in (check, learner):
            assert session.run("let declared: Vec<i32> = vec![1, 2];").ok
            assert session.stdout('println!("{}", declared.len());') == "2\n"
        lazy, eager = evcxr_mib(check), evcxr_mib(learner)
        assert eager > 4 * lazy, f"evcxr holds {lazy} MiB in a check's kernel, {eager} MiB in a learner's"
        assert check.run("let inferred = declared.iter().sum::<i32>();").ok
        assert check.stdout('println!("{inferred}");') == "3\n"
        assert evcxr_mib(check) > 4 * lazy, "the analyzer did not load for a type to infer"
    finally:
        check.close()
        learner.close()


@pytest.mark.parametrize("replay", [True, False], ids=["rustc replayed", "EVCXR_RUSTC_REPLAY=0"])
def test_a_cell_is_compiled_without_cargo_while_the_crates_stay_the_same(tmp_path, replay):
    """evcxr.patch: after cargo's build, a cell is compiled by the rustc command cargo ran
    (cargo would spend 0.1-0.2 s on each cell finding a framework's crates fresh); a `:dep`
    goes through cargo again. Seen by breaking cargo's configuration after the first cell,
    in a build-directory pool of the test's own."""
    pool = tmp_path / "pool"
    env = {"COURSEKIT_POOL": str(pool), **({} if replay else {"EVCXR_RUSTC_REPLAY": "0"})}
    with KernelSession(env=env) as session:
        assert session.stdout('let a = 20; println!("{a}");') == "20\n"
        (pool / ".cargo" / "config.toml").write_text("this is [not toml\n")
        ran = session.run('println!("{}", a + 1);')
        assert ran.ok == replay, ran.outputs
        if replay:
            assert ran.stream() == "21\n"
            compile_error = session.run('let b: i32 = "text";')
            assert "mismatched types" in str(errors(compile_error.outputs)), compile_error.outputs
        ran = session.run(':dep itoa = "=1.0.15"')  # a new manifest: cargo, which fails now
        assert not ran.ok and "config" in str(ran.outputs), ran.outputs


def _indexing(session) -> bool:
    """Whether the kernel's evcxr has rust-analyzer's indexing threads running."""
    kernel = psutil.Process(session.km.provisioner.pid)
    names = []
    for evcxr in (p for p in kernel.children() if p.name() == "evcxr_jupyter"):
        for thread in evcxr.threads():
            with contextlib.suppress(OSError):  # it ended meanwhile
                names.append(Path(f"/proc/{evcxr.pid}/task/{thread.id}/comm").read_text())
    return any(name.startswith("PrimeCaches") for name in names)


def test_a_learners_kernel_indexes_a_new_crate_graph_while_its_cells_go_on():
    """evcxr.patch: in a learner's kernel (EVCXR_LAZY_ANALYSIS=background) the `:dep` cell
    returns while rust-analyzer still indexes the crates it brought (Burn's take seconds), and
    the next cell whose variable's type must be inferred waits for the index and gets it."""
    from coursekit import pins

    with KernelSession() as session:
        assert session.run("\n".join(pins.dep_lines("burn"))).ok
        assert _indexing(session), "the :dep cell waited for rust-analyzer to index the crates"
        tensor = "burn::tensor::Tensor::<burn::backend::NdArray, 1>"
        ran = session.run(f"let t = {tensor}::from_floats([1.0, 2.0], &Default::default());")
        assert ran.ok, ran.outputs
        assert not _indexing(session)
        assert session.stdout('println!("{}", t.sum().into_scalar());') == "3\n"


@pytest.mark.parametrize("listed", [True, False], ids=["listed", "not listed"])
def test_a_dependency_listed_as_valid_is_not_checked_again(tmp_path, listed):
    """evcxr.patch: a `:dep` line that the file EVCXR_VALID_DEPS lists (the course's pinned
    ones: set-up writes it, the course kernel names it) skips evcxr's own check of it, a `cargo
    metadata` of a manifest made for it alone (0.7 s for Burn's). Seen with a line that is not
    valid: its error then comes from the build of the cells' crate (`ctx`), not from that check."""
    valid = tmp_path / "valid-deps"
    valid.write_text('ghost = { path = "/nonexistent/ghost" }\n' if listed else "")
    with KernelSession(env={"EVCXR_VALID_DEPS": str(valid)}) as session:
        ran = session.run(':dep ghost = { path = "/nonexistent/ghost" }')
    said = str(ran.outputs) + str(ran.reply)
    assert not ran.ok and "ghost" in said, said
    assert ("ctx v1.0.0" in said) == listed, said
