"""Warm build directories: a bounded pool, pruned by `coursekit clean` with stale lean std
sources (quick tier)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
