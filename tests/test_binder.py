"""Binder: the Dockerfile repo2docker would build (dry run, no Docker needed), and the heaviest
notebooks within Binder's memory and CPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


def test_repo2docker_uses_binder_files():
    repo2docker = Path(sys.executable).parent / "repo2docker"
    result = subprocess.run(
        [str(repo2docker), "--no-build", "--user-id", "1000", "--user-name", "jovyan", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    dockerfile = result.stdout
    assert '--file "binder/environment.yml"' in dockerfile
    assert "RUN ./binder/postBuild" in dockerfile
    assert 'R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile
    assert re.search(r"apt-get install .*bubblewrap ccache mold", dockerfile)


def test_postbuild_and_start():
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "set -euo pipefail" in post and "python -m coursekit setup" in post
    start = (ROOT / "binder" / "start").read_text().strip().splitlines()
    assert start[-1] == 'exec "$@"'


def test_readme_has_binder_badge_and_link():
    readme = (ROOT / "README.md").read_text()
    m = re.search(
        r"\[!\[Binder\]\(https://mybinder.org/badge_logo.svg\)\]\((https://mybinder.org/v2/gh/[^)]+)\)",
        readme,
    )
    assert m, "Binder badge missing"
    target = re.search(r"urlpath=lab/tree/(\S+\.ipynb)", m.group(1))
    assert target and (ROOT / target.group(1)).is_file()


@pytest.mark.full
def test_the_heaviest_notebooks_fit_in_binders_memory(tmp_path):
    """Binder gives a session about 2 GB and one CPU: the tch and Burn tensor lessons and a
    check of the solved Burn exercise each run to their end there, without an OOM kill (each
    in a cgroup limited to 2 GiB, no swap, and one CPU's time). bench/results.md has the
    figures, and the Burn lesson with a check beside it, which does not fit."""
    from coursekit import bench

    try:
        results = bench.bench_binder(tmp_path, bench.BINDER_ALONE)
    except OSError as exc:  # no writable cgroup file system (not root, or no delegation)
        pytest.skip(f"cannot create a memory-limited cgroup here: {exc}")
    for label, r in results.items():
        assert r["ran"] and not r["oom_kills"], f"{label} did not fit: {r}"
