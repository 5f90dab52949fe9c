"""Layout, notebook validity and pins (the quick tier)."""

from __future__ import annotations

import re
import subprocess
import tomllib

import nbformat
import pytest
import yaml

from conftest import ROOT
from coursekit import pins
from coursekit.content.notebooks import KERNELSPEC, LANGUAGE_INFO, clean

NOTEBOOKS = sorted(
    p
    for d in ("course", "exercises", "solutions")
    for p in (ROOT / d).rglob("*.ipynb")
    if ".ipynb_checkpoints" not in p.parts
)


def test_layout():
    for path in (
        "course",
        "exercises",
        "solutions",
        "tests",
        "binder",
        "coursekit",
        "README.md",
        "environment.yml",
        "nbgrader_config.py",
        "Makefile",
        ".ci/run",
        "pyproject.toml",
        "requirements.txt",
        "constraints.txt",
        "DEVELOPERS.md",
    ):
        assert (ROOT / path).exists(), path
    assert (ROOT / "course" / "00_welcome.ipynb").is_file()


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_is_valid_with_course_kernel(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec == KERNELSPEC
    assert nb.metadata.language_info == LANGUAGE_INFO


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_is_clean(path):
    """No execution timestamps, widget state or other run-to-run noise in the diffs."""
    nb = nbformat.read(path, as_version=4)
    assert nbformat.writes(clean(nbformat.read(path, as_version=4))) == nbformat.writes(nb)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_shows_pinned_versions_first(path):
    """:dep lines are exactly the pins and sit in the first code cell; the first cells print
    the versions the notebook runs with, including each framework it uses."""
    nb = nbformat.read(path, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    deps = [line for line in code[0].splitlines() if line.startswith(":dep")]
    all_deps = [line for c in code for line in c.splitlines() if line.startswith(":dep")]
    assert all_deps == deps, f"{path}: :dep lines belong in the first code cell only"
    used = [name for name in pins.crates() if set(pins.dep_lines(name)) & set(deps)]
    assert sorted(sum((pins.dep_lines(fw) for fw in used), [])) == sorted(deps), (
        f"{path}: :dep lines differ from coursekit/pins.toml"
    )
    call = re.search(r"show_versions\(([^)]*)\)", "\n".join(code[:2]))
    assert call, f"{path}: one of the first two code cells must call show_versions(...)"
    shown = re.findall(r'"(\w+)"', call.group(1))
    # more than its :dep lines where a notebook runs frameworks in kernels of their own
    assert set(used) <= set(shown) <= set(pins.crates()), f"{path}: show_versions{call.group(0)[13:]}"


def test_requirements_are_exact_and_locked():
    locked = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line.strip())
        if m:
            locked[m.group(1).lower().replace("_", "-")] = m.group(2)
    for name, version in pins.python_requirements().items():
        assert locked.get(name.replace("_", "-")) == version, f"{name} differs in constraints.txt"


def test_every_locked_package_accepts_debian_12s_python():
    """The lock installs on the oldest Python the kit supports, Debian 12's own 3.11.2 (a
    package that requires 3.11.5, as soupsieve 3 does, breaks `make setup` there)."""
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    checked, refused = 0, []
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", line.strip())
        if not m:
            continue
        dist = metadata.distribution(m.group(1))
        assert dist.version == m.group(2), f"{m.group(1)}: the environment has {dist.version}, run make setup"
        checked += 1
        if "3.11.2" not in SpecifierSet(dist.metadata.get("Requires-Python") or ""):
            refused.append(f"{m.group(1)}=={m.group(2)} requires Python {dist.metadata['Requires-Python']}")
    assert checked > 100 and not refused, refused


def test_torch_pin_matches_tch():
    torch = pins.frameworks()["tch"]["torch"]
    assert pins.python_requirements()["torch"] == torch
    for env in ("environment.yml", "binder/environment.yml"):
        deps = yaml.safe_load((ROOT / env).read_text())["dependencies"]
        assert f"pytorch-cpu={torch}" in deps, env


def test_conda_environments_agree():
    root = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    binder = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())["dependencies"]
    assert [d for d in root if isinstance(d, str)] == [d for d in binder if isinstance(d, str)]
    root_pip = [d for d in root if isinstance(d, dict)][0]["pip"]
    binder_pip = [d for d in binder if isinstance(d, dict)][0]["pip"]
    assert [p.replace("../", "").replace("..", ".") for p in binder_pip] == root_pip
    assert "-r requirements.txt" in root_pip and "-c constraints.txt" in root_pip


def test_pins_toml_is_complete():
    data = tomllib.loads((ROOT / "coursekit" / "pins.toml").read_text())
    assert set(data["frameworks"]) == {"tch", "candle", "burn", "dfdx"}
    for fw, spec in data["frameworks"].items():
        assert spec["deps"] and spec["smoke"], fw
        for dep in spec["deps"]:
            assert re.search(r'"=\d+\.\d+\.\d+"', dep), f"{dep}: pin the exact version with ="


def test_shell_scripts_parse():
    for script in ("binder/postBuild", "binder/start", ".ci/run"):
        subprocess.run(["bash", "-n", str(ROOT / script)], check=True)


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _is_python(cell) -> bool:
    return cell.source.lstrip().startswith("%%python")


PART1 = sorted((ROOT / "course" / "01_rust_for_pytorch").glob("*.ipynb"))
PART2 = sorted((ROOT / "course" / "02_tensors").glob("0[1-4]_*.ipynb"))


@pytest.mark.parametrize("path", PART1, ids=lambda p: p.name)
def test_part1_lesson_shape(path):
    """At least 6 runnable Rust cells, a deliberately failing example, a closing table."""
    nb = nbformat.read(path, as_version=4)
    rust = [c for c in _code(nb) if not _is_python(c) and not c.source.startswith(":dep")]
    runnable = [c for c in rust if "raises-exception" not in c.metadata.get("tags", [])]
    assert len(runnable) >= 6
    assert any("raises-exception" in c.metadata.get("tags", []) for c in rust)
    assert any("↔" in c.source and "|---" in c.source for c in nb.cells if c.cell_type == "markdown")


@pytest.mark.parametrize("path", PART2, ids=lambda p: p.name)
def test_part2_every_rust_cell_follows_its_pytorch_cell(path):
    nb = nbformat.read(path, as_version=4)
    code = _code(nb)
    assert len(PART2) == 4
    for before, cell in zip(code, code[1:], strict=False):
        if not _is_python(cell):
            assert _is_python(before), f"a Rust cell without its PyTorch cell before it: {cell.source[:80]!r}"
    assert any("↔" in c.source and "|---" in c.source for c in nb.cells if c.cell_type == "markdown")


@pytest.mark.parametrize("doc", ["README.md", "DEVELOPERS.md", "course/02_tensors/cheatsheet.md"])
def test_local_links_and_images_exist(doc):
    text = (ROOT / doc).read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    missing = [t for t in local if not ((ROOT / doc).parent / t).exists()]
    assert not missing, f"{doc} links to missing files: {missing}"


# The sources: a release's test cells are the same, less the hidden tests.
EXERCISES = sorted((ROOT / "solutions").glob("*/*.ipynb"))
# Macros whose redefinition by a student could turn a failing check into a passing one.
CHECKING_MACROS = r"assert\w*|debug_assert\w*|matches|panic|unreachable|todo|unimplemented"
KEYWORDS = {"if", "while", "for", "match", "return", "in", "as", "move", "loop", "let", "mut", "fn", "ref"}


def _defined_fns(cells) -> set[str]:
    return {name for c in cells for name in re.findall(r"^\s*(?:pub\s+)?fn\s+(\w+)", c.source, re.M)}


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: str(p.relative_to(ROOT)))
def test_test_cells_use_only_what_a_student_cannot_replace(path):
    """In a test cell (and the test helpers graded runs copy into each test): checking
    macros by absolute path (`::core::assert_eq!`), bare function calls only to the tasks'
    functions, the test helpers and the cell's own closures (anything else by path or as a
    method); no `:`-line first (evcxr would take it for a command); Rust only."""
    from coursekit.grading.harness import is_helpers, is_test, nbgrader_meta

    nb = nbformat.read(path, as_version=4)
    answers = [c for c in nb.cells if nbgrader_meta(c).get("solution")]
    helpers = [c for c in nb.cells if c.cell_type == "code" and is_helpers(c)]
    known = _defined_fns(answers) | _defined_fns(helpers)
    for cell in [c for c in nb.cells if is_test(c)] + helpers:
        gid = nbgrader_meta(cell).get("grade_id")
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', cell.source)  # no string literals
        code = "\n".join(line.split("//")[0] for line in code.splitlines())
        assert not _is_python(cell), f"{gid}: tests are Rust"
        first = next((line for line in code.splitlines() if line.strip()), "")
        assert not first.lstrip().startswith(":"), (
            f"{gid}: a first line starting with `:` is an evcxr command"
        )
        bare = re.findall(rf"(?<![\w:])({CHECKING_MACROS})!", code)
        assert not bare, f"{gid}: call {sorted(set(bare))} by absolute path (::core::...!)"
        local = set(re.findall(r"let\s+(?:mut\s+)?(\w+)\s*(?::[^=]*)?=\s*(?:move\s*)?\|", code))
        calls = set(re.findall(r"(?<![\w:.!])([a-z_]\w*)\s*\(", code)) - KEYWORDS
        unknown = calls - known - local - _defined_fns([cell])
        assert not unknown, f"{gid}: {sorted(unknown)} can be redefined by a student: call them by path"
    if helpers:
        assert all(not re.search(r"^let ", c.source, re.M) for c in helpers), "helpers hold items only"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_check_has_no_variable_type_to_infer(path):
    """A check's kernel indexes no crates until a variable's type must be inferred
    (EVCXR_LAZY_ANALYSIS, evcxr.patch): the notebook's own Rust cells that run outside the
    harness (setup and answer cells; the tests run inside its closure) declare the type of
    each variable they keep, `let name: Type = ...`, so a check of the solution never pays
    for the index."""
    from coursekit.grading.harness import is_test, nbgrader_meta

    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or is_test(cell) or _is_python(cell):
            continue
        untyped = re.findall(r"^let\s+(?!(?:mut\s+)?\w+\s*:[^=])(.*)", cell.source, re.M)
        assert not untyped, f"{nbgrader_meta(cell).get('grade_id')}: give `let {untyped[0]}` its type"


NOTEBOOK_CODE = [p for p in NOTEBOOKS if "exercises" not in p.parts]


@pytest.mark.parametrize("path", NOTEBOOK_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_answer_cells_can_run_again(path):
    """evcxr files an `impl` under the named item above it in its cell; an `impl` with none
    above it is added again at every run ("conflicting implementations"), so a learner could
    never re-run the cell after fixing it. Answer cells never start with an `impl`."""
    from coursekit.grading.harness import nbgrader_meta

    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or not nbgrader_meta(cell).get("solution"):
            continue
        code = "\n".join(
            line for line in cell.source.splitlines() if not line.lstrip().startswith(("//", "#["))
        )
        first = re.search(
            r"^(?:pub\s+)?(impl|fn|struct|enum|type|trait|const|static|mod|let|use)\b", code, re.M
        )
        assert not (first and first.group(1) == "impl"), (
            f"{nbgrader_meta(cell)['grade_id']} starts with an impl"
        )


def _part(path) -> str:
    return path.relative_to(ROOT).parts[1][:2]  # course/02_tensors/… -> "02"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: str(p.relative_to(ROOT)))
def test_tasks_use_only_what_the_lessons_show(path):
    """Every method a reference solution calls appears in a lesson of its part or an earlier
    one, or in the cheat-sheet the lessons link: no task needs an API the course never shows."""
    from coursekit.grading.harness import nbgrader_meta

    shown = (ROOT / "course" / "02_tensors" / "cheatsheet.md").read_text()
    for lesson in sorted((ROOT / "course").glob("*/*.ipynb")):
        if _part(lesson) <= _part(path):
            shown += "\n".join(c.source for c in nbformat.read(lesson, as_version=4).cells)
    missing = set()
    for cell in nbformat.read(path, as_version=4).cells:
        for body in re.findall(r"BEGIN SOLUTION(.*?)END SOLUTION", cell.source, re.S):
            for name in re.findall(r"\.(\w+)\s*(?:::<[^>]*>)?\(", body):
                if not re.search(rf"\b{name}\b", shown):
                    missing.add(f"{nbgrader_meta(cell).get('grade_id')}: .{name}(…)")
    assert not missing, f"not shown by any lesson up to this part: {sorted(missing)}"
