"""The evcxr_jupyter build that `make` starts in the background while pip installs
(coursekit/setup/evcxr_build.py), against a stand-in `cargo` that records its builds:
set-up waits for a running build instead of starting a second one, and builds in the
foreground when the background one failed. The sources it builds are crates.io's, checked
against pins.toml and patched with the course's change to evcxr."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from coursekit import pins
from coursekit.setup import evcxr_build, slots

FAKE_CARGO = """#!/bin/bash
if [ "$1 $2" = "install --list" ]; then
    [ -f "$STATE/installed" ] && echo "evcxr_jupyter v$(cat "$STATE/installed"):"
    exit 0
fi
echo "$*" >> "$STATE/builds"
sleep "${BUILD_SECONDS:-0}"
if [ -f "$STATE/fail" ]; then rm "$STATE/fail"; echo "error: the build failed"; exit 101; fi
mkdir -p "$CARGO_HOME/bin" && touch "$CARGO_HOME/bin/evcxr_jupyter"
grep -m1 '^version = ' "$5/Cargo.toml" | cut -d'"' -f2 > "$STATE/installed"
"""

KEPT = slots.cache_dir() / "crates"  # the machine's own copies of the two crates (set-up keeps them)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A fresh machine: no evcxr_jupyter, an empty cache, the stand-in cargo first on PATH."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    (bin_dir / "cargo").write_text(FAKE_CARGO)
    (bin_dir / "cargo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo-home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    if KEPT.is_dir():  # else they are downloaded from crates.io
        shutil.copytree(KEPT, slots.cache_dir() / "crates")
    monkeypatch.setenv("STATE", str(state))
    monkeypatch.setenv("BUILD_SECONDS", "3")
    return state


def start_background() -> subprocess.CompletedProcess:
    """What the Makefile runs before pip; it must return while the build goes on."""
    return subprocess.run(
        [sys.executable, "-m", "coursekit.setup.evcxr_build", "--background"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def builds(state) -> list[str]:
    path = state / "builds"
    return path.read_text().splitlines() if path.exists() else []


def test_setup_waits_for_the_background_build_instead_of_building_again(machine):
    started = time.monotonic()
    assert "building evcxr_jupyter in the background" in start_background().stdout
    assert time.monotonic() - started < 2.5, "make waited for the build"
    said = []
    assert evcxr_build.ensure(said.append) == evcxr_build.binary()
    assert len(builds(machine)) == 1
    assert builds(machine)[0].startswith("install --locked --force --path "), builds(machine)
    assert any("waiting for the evcxr_jupyter build" in s for s in said), said
    assert evcxr_build.installed_version() == evcxr_build.wanted_version()
    # built: neither a second `make` nor set-up builds again
    assert start_background().stdout == ""
    evcxr_build.ensure(said.append)
    assert len(builds(machine)) == 1


def test_a_failed_background_build_is_built_again_in_the_foreground(machine):
    (machine / "fail").touch()
    start_background()
    said = []
    evcxr_build.ensure(said.append)
    assert len(builds(machine)) == 2
    assert any("the background build did not install it" in s for s in said), said
    assert evcxr_build.installed_version() == evcxr_build.wanted_version()


def test_a_build_that_fails_in_the_foreground_is_a_clear_error(machine, monkeypatch):
    monkeypatch.setenv("BUILD_SECONDS", "0")
    (machine / "fail").touch()
    with pytest.raises(evcxr_build.BuildError, match="building evcxr_jupyter .* failed"):
        evcxr_build.ensure(lambda s: None)


def test_the_sources_built_are_crates_io_s_with_the_course_s_patch(machine, tmp_path):
    jupyter = evcxr_build._sources(tmp_path / "src")
    version = pins.evcxr_version()
    analyzer = (tmp_path / "src" / f"evcxr-{version}" / "src" / "rust_analyzer.rs").read_text()
    assert "fn prime_caches(&mut self)" in analyzer and "self.prime_caches();" in analyzer
    assert "pub(crate) fn declared_variables(" in analyzer
    context = (tmp_path / "src" / f"evcxr-{version}" / "src" / "eval_context.rs").read_text()
    assert 'std::env::var_os("EVCXR_LAZY_ANALYSIS")' in context
    module = (tmp_path / "src" / f"evcxr-{version}" / "src" / "module.rs").read_text()
    assert "fn record_replay()" in module and "let inputs = replay_inputs(&command, config);" in module
    assert "self.priming = Some(std::thread::spawn(" in analyzer and 'v == "background"' in context
    metadata = (tmp_path / "src" / f"evcxr-{version}" / "src" / "cargo_metadata.rs").read_text()
    assert "pub(crate) fn is_known_valid(" in metadata and "is_known_valid(dep, dep_config)" in context
    lock = jupyter.joinpath("Cargo.lock").read_text()
    evcxr = lock[lock.index('name = "evcxr"\n') :].split("[[package]]")[0]
    assert "source =" not in evcxr and "checksum" not in evcxr, "evcxr must be the patched path crate"
    assert f'name = "evcxr_jupyter"\nversion = "{evcxr_build.wanted_version()}"' in lock
    assert lock.count("checksum = ") > 300, "every other crate stays locked to its checksum"
    manifest = jupyter.joinpath("Cargo.toml").read_text()
    assert f'evcxr = {{ path = "../evcxr-{version}" }}' in manifest
    assert evcxr_build.wanted_version().startswith(f"{version}+coursekit.")


def test_a_crate_that_is_not_the_pinned_one_is_refused(machine, tmp_path, monkeypatch):
    forged = tmp_path / "mirror" / "evcxr"
    forged.mkdir(parents=True)
    (forged / f"evcxr-{pins.evcxr_version()}.crate").write_bytes(b"not the crate")
    monkeypatch.setattr(evcxr_build, "CRATES", (tmp_path / "mirror").as_uri())
    kept = slots.cache_dir() / "crates" / f"evcxr-{pins.evcxr_version()}.crate"
    kept.unlink(missing_ok=True)
    with pytest.raises(evcxr_build.BuildError, match="SHA-256 differs from pins.toml"):
        evcxr_build._crate("evcxr")
    assert not kept.exists()
    kept.write_bytes(b"a kept copy gone bad")  # not trusted either: fetched again, refused again
    with pytest.raises(evcxr_build.BuildError, match="SHA-256 differs"):
        evcxr_build._crate("evcxr")
    monkeypatch.setattr(evcxr_build, "CRATES", (tmp_path / "nowhere").as_uri())
    with pytest.raises(evcxr_build.BuildError, match="could not download"):
        evcxr_build._crate("evcxr")


def test_a_patch_that_does_not_apply_is_a_clear_error(machine, tmp_path, monkeypatch):
    shipped, text = evcxr_build.wanted_version(), evcxr_build.PATCH.read_text()
    stale = tmp_path / "stale.patch"
    stale.write_text(
        evcxr_build.PATCH.read_text().replace("self.analysis_host.apply_change(change);", "gone();")
    )
    monkeypatch.setattr(evcxr_build, "PATCH", stale)
    with pytest.raises(evcxr_build.BuildError, match="evcxr.patch does not apply .* are not the patch's"):
        evcxr_build._sources(tmp_path / "src")
    assert evcxr_build.wanted_version() != shipped, "another diff, another version: built again"
    stale.write_text("Other words about it.\n--- " + text.split("\n--- ", 1)[1])
    assert evcxr_build.wanted_version() == shipped, "the same diff described otherwise is the same build"


def test_a_patch_applies_hunk_by_hunk_with_exact_context(tmp_path):
    (tmp_path / "src").mkdir()
    source = tmp_path / "src" / "lib.rs"
    source.write_text("fn a() {}\n\nfn b() {}\nfn c() {}\nfn d() {}\n")
    patch = (
        "What it does.\n\n--- a/src/lib.rs\n+++ b/src/lib.rs\n"
        "@@ -1,3 +1,4 @@\n fn a() {}\n+fn a2() {}\n\n fn b() {}\n"  # a blank context line left empty
        "@@ -4,2 +5,1 @@\n fn c() {}\n-fn d() {}\n"
    )
    evcxr_build._apply(patch, tmp_path)
    assert source.read_text() == "fn a() {}\nfn a2() {}\n\nfn b() {}\nfn c() {}\n"
    with pytest.raises(evcxr_build.BuildError, match="src/lib.rs: the lines from 1 on are not the patch's"):
        evcxr_build._apply(patch, tmp_path)  # applied already: its context is gone


def test_a_patch_of_two_files_ends_each_hunk_where_its_header_says(tmp_path):
    (tmp_path / "src").mkdir()
    one, two = tmp_path / "src" / "one.rs", tmp_path / "src" / "two.rs"
    one.write_text("fn a() {}\nfn b() {}\n")
    two.write_text("fn c() {}\n")
    patch = (
        "--- a/src/one.rs\n+++ b/src/one.rs\n@@ -1,2 +1,3 @@\n fn a() {}\n+fn a2() {}\n fn b() {}\n"
        # the next file's header starts with `-`, right after a hunk's context line
        "--- a/src/two.rs\n+++ b/src/two.rs\n@@ -1 +1 @@\n-fn c() {}\n+fn c2() {}\n"
    )
    evcxr_build._apply(patch, tmp_path)
    assert one.read_text() == "fn a() {}\nfn a2() {}\nfn b() {}\n"
    assert two.read_text() == "fn c2() {}\n"
    one.write_text("fn a() {}\nfn b() {}\n")
    two.write_text("fn c() {}\n")
    with pytest.raises(evcxr_build.BuildError, match="src/two.rs: a hunk is shorter than its header says"):
        evcxr_build._apply(patch.replace("@@ -1 +1 @@", "@@ -1,2 +1,2 @@"), tmp_path)


def test_every_pinned_dep_line_and_the_prelude_are_listed_as_valid(tmp_path, monkeypatch):
    """The file the course kernel names in EVCXR_VALID_DEPS (evcxr then skips its own check of
    those `:dep` lines) holds exactly init.evcxr's prelude line and the pinned ones, which the
    notebooks use as they are (tests/test_structure.py), in evcxr's `name = config` form."""
    from coursekit.kernel.evcxr_child import VALID_DEPS
    from coursekit.setup import install

    monkeypatch.setattr(install, "share_dir", lambda: tmp_path)
    install.write_evcxr_config()
    config = install.evcxr_config_dir(True)
    listed = (config / VALID_DEPS).read_text().splitlines()
    init = [line for line in (config / "init.evcxr").read_text().splitlines() if line.startswith(":dep ")]
    pinned = [line for name in pins.crates() for line in pins.dep_lines(name)]
    assert [f":dep {line}" for line in listed] == init + pinned
    assert not (install.evcxr_config_dir(False) / VALID_DEPS).exists(), "the plain kernel checks every :dep"
