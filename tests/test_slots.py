"""Warm build directories: a bounded pool, new ones copied from a warm one, pruned by
`coursekit clean` with stale lean std sources (quick tier, but for a kernel in a copy)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from coursekit.setup import prewarm, rust_src, slots


def test_the_pool_is_bounded_and_overflow_uses_evcxrs_own_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    held = [slots.acquire() for _ in range(slots.POOL_SIZE + slots.OVERFLOW)]
    assert all(held) and len({slot for slot, _ in held}) == len(held)
    assert slots.acquire() is None, "no new directory beyond the cap"
    for _, fd in held:
        os.close(fd)
    assert slots.acquire() is not None


def test_clean_removes_overflow_and_stale_directories_but_not_busy_ones(tmp_path):
    pool = tmp_path / "coursekit" / "evcxr-slots"
    for name in ("0", "1", "3", "4", "grade"):
        (pool / f"slot-{name}" / "target").mkdir(parents=True)
        (pool / f"slot-{name}" / "target" / "lib.rlib").write_bytes(b"x" * 5000)
    (pool / "slot-grade" / prewarm.STAMP).write_text(json.dumps({"tch": "an old key"}))
    lean = tmp_path / "coursekit" / "rust-src" / "lean"
    for copy, version in (("old", "1.80.0"), ("current", rust_src.rustc_version())):
        (lean / copy / "library" / "core" / "src").mkdir(parents=True)
        (lean / copy / "library" / "core" / "src" / "lib.rs").write_text("")
        (lean / copy / "library" / rust_src.VERSION_FILE).write_text(version)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    busy = subprocess.Popen(  # a kernel holding overflow directory 4
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
            " fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
            str(pool / "slot-4" / ".lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert busy.stdout.readline().strip() == "locked"
        result = subprocess.run(
            [sys.executable, "-m", "coursekit", "clean"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        left = sorted(p.name for p in pool.glob("slot-*"))
        assert left == ["slot-0", "slot-1", "slot-4"], result.stdout
        assert "removed" in result.stdout and "slot-grade" in result.stdout and "freed" in result.stdout
        assert sorted(p.name for p in lean.iterdir()) == ["current"], "std sources of an older Rust go"
    finally:
        busy.kill()


def _warm_dir(slot, frameworks: list[str]) -> None:
    (slot / "target" / "debug" / ".fingerprint" / "torch-sys-1").mkdir(parents=True)
    (slot / "target" / "debug" / ".fingerprint" / "torch-sys-1" / "lib-torch_sys").write_text("h")
    (slot / "target" / "debug" / "deps").mkdir()
    (slot / "target" / "debug" / "deps" / "libtorch_sys-1.rlib").write_bytes(slot.name.encode())
    (slot / "target" / "debug" / "latest").symlink_to("deps/libtorch_sys-1.rlib")
    (slot / "libcode_3.so").write_bytes(b"a past session's cell")
    (slot / prewarm.STAMP).write_text(json.dumps(dict.fromkeys(frameworks, "key")))


def test_a_new_directory_starts_as_a_copy_of_a_warm_one_no_kernel_holds(tmp_path):
    pool = tmp_path / "evcxr-slots"
    for name, frameworks in (("0", ["tch", "burn"]), ("1", ["tch"])):
        (pool / f"slot-{name}").mkdir(parents=True)
        _warm_dir(pool / f"slot-{name}", frameworks)
    held = slots._lock(pool / "slot-0", wait=False)  # a kernel uses the warmer one
    new = pool / "slot-2"
    mine = slots._lock(new, wait=False)
    try:
        assert slots.seed(new) == pool / "slot-1"
        assert (new / "target" / "debug" / "deps" / "libtorch_sys-1.rlib").read_bytes() == b"slot-1"
        assert os.readlink(new / "target" / "debug" / "latest") == "deps/libtorch_sys-1.rlib"
        assert json.loads((new / prewarm.STAMP).read_text()) == {"tch": "key"}
        assert not (new / "libcode_3.so").exists(), "evcxr renames new cell libraries onto old ones"
        assert slots.seed(new) is None, "a directory with a build in it is left as it is"
    finally:
        os.close(held)
    other = pool / "slot-3"
    assert slots.seed(other) == pool / "slot-0", "with every one free, the warmest"
    assert slots.seed(pool / "slot-9") is not None and slots.seed(tmp_path / "empty" / "slot-0") is None
    os.close(mine)


def test_a_copy_of_a_busy_directory_survives_what_cargo_removes_meanwhile(tmp_path):
    """cargo and evcxr create, rename and remove files and folders in a busy directory while
    it is copied (a file gone between the listing and its size raised FileNotFoundError, which
    killed the kernel's start): what vanishes is left out, and the copy is made."""
    import threading

    pool = tmp_path / "evcxr-slots"
    src = pool / "slot-0"
    src.mkdir(parents=True)
    _warm_dir(src, ["burn"])
    incremental = src / "target" / "debug" / "incremental"
    stop = threading.Event()

    def cargo():
        n = 0
        while not stop.is_set():
            session = incremental / f"s-{n}"
            session.mkdir(parents=True)
            for i in range(20):
                (session / f"{i}.o").write_bytes(b"x")
            shutil.rmtree(session)
            n += 1

    churn = threading.Thread(target=cargo)
    for i in range(2000):
        (src / "target" / "debug" / "deps" / f"lib{i}.rmeta").write_bytes(b"m")
    held = slots._lock(src, wait=False)  # busy: its kernel compiles
    churn.start()
    try:
        for _ in range(5):
            assert slots.seed(pool / "slot-1") == src
            assert json.loads((pool / "slot-1" / prewarm.STAMP).read_text()) == {"burn": "key"}
            shutil.rmtree(pool / "slot-1")
    finally:
        stop.set()
        churn.join()
        os.close(held)


def test_a_copy_that_fails_is_removed_and_evcxr_builds_from_the_start(tmp_path, monkeypatch, capfd):
    pool = tmp_path / "evcxr-slots"
    (pool / "slot-0").mkdir(parents=True)
    _warm_dir(pool / "slot-0", ["tch"])

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copy2", disk_full)
    new = pool / "slot-1"
    assert slots.seed(new) is None
    assert not (new / "target").exists() and not (new / prewarm.STAMP).exists()
    assert "No space left on device" in capfd.readouterr().err


@pytest.mark.full
def test_a_kernel_in_a_copied_directory_compiles_only_its_cells():
    """cargo keeps a copy warm: tch's build script (which compiles a C++ shim and records
    where) and every crate stay fresh at the new path; only the cells' crate is compiled."""
    from coursekit.kernel.session import KernelSession

    name = f"copy-test-{os.getpid()}"
    slot = slots.pool_dir() / f"slot-{name}"
    warm = [n for n in (0, 1) if prewarm.is_warm(n, "tch")]
    assert warm, "set-up warms tch"
    # Copied as seed() copies a free directory, holding its lock: a kernel compiling in a
    # busy one meanwhile would leave what it compiled stale in the copy (built again, rightly).
    sources = [slots.pool_dir() / f"slot-{n}" for n in warm]
    source, fd = next(
        ((d, fd) for d in sources if (fd := slots._lock(d, wait=False)) is not None), (None, None)
    )
    if fd is None:
        source, fd = sources[0], slots._lock(sources[0], wait=True)
    try:
        try:
            assert slots._copy(source, slot)
        finally:
            os.close(fd)
        started = time.time() - 1  # file times may be coarser than the clock

        def cells_or_rustc_info(path) -> bool:
            return "ctx" in str(path) or path.name.startswith("libcode_") or path.name == ".rustc_info.json"

        with KernelSession(env={"COURSEKIT_SLOT": name}, startup_timeout=300) as kernel:
            for cell in ["\n".join(prewarm.pins.dep_lines("tch")), prewarm.pins.frameworks()["tch"]["smoke"]]:
                ran = kernel.run(cell, timeout=600)
                assert ran.ok, ran.error
        built = [
            p.relative_to(slot)
            for p in (slot / "target").rglob("*")
            if p.is_file() and p.stat().st_mtime > started and not cells_or_rustc_info(p)
        ]
        assert next(slot.glob("target/*/debug/build/torch-sys-*/out"), None), "a copy of tch's build"
        assert not built, built[:20]
    finally:
        shutil.rmtree(slot, ignore_errors=True)
