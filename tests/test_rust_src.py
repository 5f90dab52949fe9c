"""The Rust std sources evcxr's analyzer reads: which versions fit, where set-up finds them,
fetching Debian's package into the cache, and the kernel probe that proves they work
(issue: the README's commands on a fresh Debian 12 machine)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT
from coursekit.setup import doctor, rust_src


def test_versions_that_fit_rustc():
    assert rust_src.fits("1.95.0", "1.95.0")
    assert rust_src.fits("1.95.1", "1.95.0")
    assert rust_src.fits("1.97.1", "1.95.0")
    assert not rust_src.fits("1.85.0", "1.95.0"), "Debian 12's rust-web-src: the case that broke"
    assert rust_src.fits("1.94.1", "1.95.0")
    assert not rust_src.fits("1.93.1", "1.95.0")
    assert not rust_src.fits("1.98.0", "1.95.0")
    assert not rust_src.fits("2.95.0", "1.95.0")
    assert rust_src.upstream("1.95.0+dfsg1-2~bpo13+1") == "1.95.0"
    assert rust_src.upstream("1.85.0+dfsg3-1~deb12u3") == "1.85.0"


def _library(root: Path) -> Path:
    (root / "core" / "src").mkdir(parents=True)
    (root / "core" / "src" / "lib.rs").write_text("// core\n")
    return root


def test_version_is_read_from_debian_folders_and_the_kits_marker(tmp_path):
    assert rust_src.version_of(_library(tmp_path / "rustc-1.96.0" / "library")) == "1.96.0"
    marked = _library(tmp_path / "x" / "library")
    assert rust_src.version_of(marked) is None
    (marked / rust_src.VERSION_FILE).write_text("1.95.0\n")
    assert rust_src.version_of(marked) == "1.95.0"


def test_rust_src_path_that_does_not_fit_is_an_error_never_ignored(tmp_path, monkeypatch):
    old = _library(tmp_path / "rustc-1.85.0" / "library")
    monkeypatch.setenv("RUST_SRC_PATH", str(old))
    with pytest.raises(rust_src.SourcesError) as err:
        rust_src.find("1.95.0")
    assert "holds Rust 1.85.0, but rustc is 1.95.0" in str(err.value)
    assert "1.94 to 1.97" in str(err.value) and "unset RUST_SRC_PATH" in str(err.value)
    monkeypatch.setenv("RUST_SRC_PATH", str(tmp_path / "nothing"))
    with pytest.raises(rust_src.SourcesError, match="no core/src/lib.rs"):
        rust_src.find("1.95.0")
    monkeypatch.setenv("RUST_SRC_PATH", str(_library(tmp_path / "rustc-1.95.0" / "library")))
    assert rust_src.find("1.95.0").version == "1.95.0"


def _deb(files: dict[str, bytes]) -> bytes:
    """A .deb (ar archive) whose data.tar.xz holds `files`."""
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w:xz") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    members = {"debian-binary": b"2.0\n", "control.tar.xz": b"", "data.tar.xz": tar_bytes.getvalue()}
    out = b"!<arch>\n"
    for name, body in members.items():
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode() + body
        out += b"\n" if len(body) % 2 else b""
    return out


def test_a_debian_package_is_unpacked_into_the_cache_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    deb = _deb(
        {
            "./usr/src/rustc-1.96.0/library/core/src/lib.rs": b"// core\n",
            "./usr/src/rustc-1.96.0/library/std/src/lib.rs": b"// std\n",
            "./usr/src/rustc-1.96.0/src/tools/x.rs": b"not the library\n",
            "./usr/share/doc/rust-src/copyright": b"...",
        }
    )
    found = rust_src.unpack(deb, "1.96.0", "test")
    assert found.library == tmp_path / "cache" / "coursekit" / "rust-src" / "1.96.0" / "library"
    assert sorted(p.name for p in found.library.iterdir()) == [
        "core",
        rust_src.ORIGIN_FILE,
        rust_src.VERSION_FILE,
        "std",
    ]
    assert rust_src.version_of(found.library) == "1.96.0"
    with pytest.raises(rust_src.SourcesError, match="not a .deb"):
        rust_src.unpack(b"<html>", "1.96.0", "test")


def test_the_lean_copy_leaves_out_x86_intrinsics_and_the_library_workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    full = _library(tmp_path / "rustc-1.95.0" / "library")
    arch = full / "stdarch/crates/core_arch/src"
    for path, body in {
        "x86/mod.rs": "mod avx;\npub use self::avx::*;\n",
        "x86/macros.rs": "macro_rules! m { () => {} }\n",
        "x86/avx.rs": "pub fn _mm256_add_pd() {}\n",
        "x86_64/sse41.rs": "pub fn _mm_x() {}\n",
        "aarch64/neon.rs": "pub fn vaddq() {}\n",
        "simd.rs": "pub struct Simd;\n",
    }.items():
        (arch / path).parent.mkdir(parents=True, exist_ok=True)
        (arch / path).write_text(body)
    for name in ("Cargo.toml", "Cargo.lock"):
        (full / name).write_text("[workspace]\n")
    sources = rust_src.Sources(full, "1.95.0", "test")
    library = rust_src.lean(sources)
    assert rust_src.is_library(library) and rust_src.version_of(library) == "1.95.0"
    assert library.is_relative_to(rust_src.cache_dir())
    lean_arch = library / "stdarch/crates/core_arch/src"
    assert (lean_arch / "x86/avx.rs").read_text() == "" and (lean_arch / "x86_64/sse41.rs").read_text() == ""
    for kept in ("x86/mod.rs", "x86/macros.rs", "aarch64/neon.rs", "simd.rs"):
        assert (lean_arch / kept).read_text() == (arch / kept).read_text(), kept
    assert not (library / "Cargo.toml").exists() and not (library / "Cargo.lock").exists()
    assert (arch / "x86/avx.rs").read_text() == "pub fn _mm256_add_pd() {}\n", "the sources are untouched"
    assert (full / "Cargo.toml").is_file() and rust_src.version_of(full) == "1.95.0"
    (library / "sentinel").write_text("")
    assert rust_src.lean(sources) == library and (library / "sentinel").exists(), "built once"
    other = rust_src.lean(rust_src.Sources(_library(tmp_path / "rustc-1.96.0" / "library"), "1.96.0", "t"))
    assert other != library and rust_src.version_of(other) == "1.96.0"

    old = rust_src.lean(rust_src.Sources(_library(tmp_path / "rustc-1.90.0" / "library"), "1.90.0", "t"))
    (old.parent.parent / ".lean-half-built").mkdir()
    removed = [path for path, _ in rust_src.prune_lean("1.95.0")]
    assert sorted(removed) == sorted([old.parent, old.parent.parent / ".lean-half-built"])
    assert rust_src.is_library(library) and rust_src.is_library(other), "copies that fit are kept"


def test_without_a_lean_copy_the_kernels_read_the_sources_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    full = _library(tmp_path / "rustc-1.95.0" / "library")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rust_src.shutil, "copytree", full_disk)
    said = []
    assert rust_src.lean(rust_src.Sources(full, "1.95.0", "test"), log=said.append) == full
    assert "No space left on device" in said[0]
    assert not any((rust_src.cache_dir() / "lean").iterdir()), "nothing half-built is left"


@pytest.mark.full
def test_fetching_fitting_sources_from_the_debian_archive(tmp_path, monkeypatch):
    """The fallback where rustup cannot download: the real archive, verified, unpacked."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rustc = rust_src.rustc_version()
    found = rust_src.download(rustc, log=lambda msg: None)
    assert rust_src.is_library(found.library) and (found.library / "std" / "src" / "lib.rs").is_file()
    assert rust_src.fits(found.version, rustc)
    assert found.version.rsplit(".", 1)[0] == rustc.rsplit(".", 1)[0], "the same release comes first"


def test_kernel_keeps_a_vec_between_cells():
    """The quick tier's proof that the std sources work: what doctor runs last."""
    assert doctor.probe_kernel() is None


def test_the_kernels_sources_fit_rustc():
    spec = json.loads((Path(sys.prefix) / "share/jupyter/kernels/rust-pytorch/kernel.json").read_text())
    library = Path(spec["env"]["RUST_SRC_PATH"])
    assert rust_src.fits(rust_src.version_of(library), rust_src.rustc_version()), library


def test_doctor_fails_with_the_fix_when_rust_src_path_does_not_fit(tmp_path):
    old = _library(tmp_path / "rustc-1.85.0" / "library")
    result = subprocess.run(
        [sys.executable, "-m", "coursekit", "doctor"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "RUST_SRC_PATH": str(old)},
        timeout=600,
    )
    assert result.returncode == 1, result.stdout
    assert "FAIL  RUST_SRC_PATH=" + str(old) + " holds Rust 1.85.0" in result.stdout
    assert "fix: unset RUST_SRC_PATH" in result.stdout
