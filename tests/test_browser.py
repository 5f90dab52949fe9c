"""JupyterLab in headless Chromium (issue: real-browser acceptance).

The server is started exactly as `make lab` starts it (`python -m coursekit lab`). In the
welcome notebook the test clears the outputs, runs a Rust cell and a `%%python` cell, sees
both outputs, and closes the notebook, which shuts its kernel down; then, in a copy of an
exercise, it types the solutions and clicks nbgrader's Validate button.
COURSEKIT_SCREENSHOTS=1 refreshes the README's screenshots (docs/screenshots/); otherwise
they go to the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT

pytestmark = pytest.mark.full

CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "coursekit-e2e"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
EXERCISE = ROOT / "exercises" / "01_rust" / "01_values_moves_clone.ipynb"
SOLUTION = ROOT / "solutions" / "01_rust" / "01_values_moves_clone.ipynb"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (coursekit setup installs it where apt works)")
    tmp = tmp_path_factory.mktemp("lab")
    settings = tmp / "settings"  # this test's JupyterLab settings: no autosave, every cell rendered
    for plugin, value in {
        "docmanager-extension/plugin": {"autosave": False},
        "notebook-extension/tracker": {"windowingMode": "none"},
    }.items():
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    port = _free_port()
    env = {**os.environ, "JUPYTER_TOKEN": TOKEN, "JUPYTERLAB_SETTINGS_DIR": str(settings)}
    log = (tmp / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "coursekit", "lab", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    from playwright.sync_api import sync_playwright

    shots = ROOT / "docs" / "screenshots" if os.environ.get("COURSEKIT_SCREENSHOTS") else tmp
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 760})
        page.set_default_timeout(600_000)
        yield page, f"http://127.0.0.1:{port}", shots
        browser.close()
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=60)


def open_notebook(page, base: str, path: str):
    page.goto(f"{base}/lab/tree/{path}?token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.get_by_text("Rust + PyTorch | Idle").wait_for()


def code_cell(page, text: str):
    """The code cell whose source contains `text`."""
    return page.locator(".jp-CodeCell").filter(has=page.locator(".jp-InputArea", has_text=text)).first


def run_cell(page, cell) -> None:
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")


def test_welcome_notebook_runs_rust_and_python_cells(lab):
    page, base, shots = lab
    before = (ROOT / "course" / "00_welcome.ipynb").read_bytes()
    open_notebook(page, base, "course/00_welcome.ipynb")
    page.get_by_role("menuitem", name="Edit").click()
    page.get_by_text("Clear Outputs of All Cells").click()
    rust = code_cell(page, "let xs: Vec<f32>")
    python = code_cell(page, "xs = torch.tensor")
    assert rust.locator(".jp-OutputArea-output").count() == 0
    run_cell(page, rust)
    rust.locator(".jp-OutputArea-output", has_text="mean = 2.5").wait_for()
    run_cell(page, python)
    python.locator(".jp-OutputArea-output", has_text="mean = 2.5").wait_for()
    assert rust.locator(".jp-OutputArea-output", has_text="2.5").count() == 2  # println and the value
    rust.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "welcome.png"))

    # Closing the notebook shuts its kernel down (the course's JupyterLab settings): a Rust
    # kernel left running holds gigabytes, which Binder and laptops do not have to spare.
    def kernels() -> list:
        return page.request.get(f"{base}/api/kernels?token={TOKEN}").json()

    assert kernels(), "the notebook's kernel is running"
    page.get_by_role("menuitem", name="File").click()
    page.get_by_text("Close Tab", exact=True).click()
    page.get_by_role("button", name="Discard").click()  # the cleared outputs are not saved
    deadline = time.monotonic() + 60
    while kernels() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not kernels(), "closing the notebook left its kernel running"
    assert (ROOT / "course" / "00_welcome.ipynb").read_bytes() == before, (
        "the test must not save the notebook"
    )


def test_python_cells_are_highlighted_as_python(lab):
    """The kit's JupyterLab extension (coursekit/kernel/highlight): a `%%python` cell's body is
    Python — `import` and `def` take the keyword colour, as `let` and `fn` do in a Rust cell,
    while `import` in a Rust cell is a plain name."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page, base, _ = lab
    open_notebook(page, base, "course/00_welcome.ipynb")

    def colour(cell, word: str) -> str:
        """The colour of `word` as a highlighted token of its own ('plain' if it is none)."""
        token = cell.locator(".cm-content span").get_by_text(word, exact=True).first
        try:
            token.wait_for(timeout=30_000)  # the language loads after the cells render
        except PlaywrightTimeout:
            return "plain"
        return token.evaluate("e => getComputedStyle(e).color")

    rust = code_cell(page, "let xs: Vec<f32>")
    python = code_cell(page, "xs = torch.tensor")
    keyword = colour(rust, "let")
    assert keyword != colour(rust, "xs")
    assert colour(python, "import") == keyword, "`import` in a %%python cell is not a Python keyword"
    page.get_by_role("menuitem", name="File").click()
    page.get_by_text("Close Tab", exact=True).click()


def test_exercise_validates_in_the_browser(lab):
    page, base, shots = lab
    scratch = EXERCISE.with_name("e2e_scratch.ipynb")
    shutil.copy(EXERCISE, scratch)
    try:
        open_notebook(page, base, f"exercises/01_rust/{scratch.name}")
        solutions = [
            c.source
            for c in nbformat.read(SOLUTION, as_version=4).cells
            if c.metadata.get("nbgrader", {}).get("solution")
        ]
        for source in solutions:
            first_line = source.splitlines()[0]
            cell = code_cell(page, first_line)
            cell.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Control+a")
            page.keyboard.insert_text(source)
        page.get_by_role("button", name="Validate").click()
        page.get_by_text("Success! Your notebook passes all the tests.").wait_for()
        page.screenshot(path=str(shots / "validate.png"))
    finally:
        scratch.unlink(missing_ok=True)
