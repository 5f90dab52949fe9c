"""Stand-ins for the crates the pins never compile: cargo builds exactly what it built
without them, and rust-analyzer's crate graph (`cargo metadata`) loses the unused trees."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

from coursekit import pins
from coursekit.setup import stand_ins


def cargo(root: Path, *args: str) -> str:
    return subprocess.run(["cargo", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def test_stand_ins_change_what_the_analyzer_loads_not_what_cargo_builds(tmp_path):
    names = stand_ins.write(tmp_path / ".cargo")
    assert {"burn-tch", "burn-wgpu", "burn-cuda"} <= set(names)
    patch = stand_ins.patch_section(tmp_path / ".cargo")
    burn = stand_ins._workspace(tmp_path / "burn", pins.dep_lines("burn"))
    before_meta = json.loads(cargo(burn, "metadata", "--format-version", "1"))
    before_tree = cargo(burn, "tree", "--edges", "normal,build", "--prefix", "none", "-f", "{p}")
    (burn / ".cargo").mkdir()
    (burn / ".cargo" / "config.toml").write_text(patch)
    after_meta = json.loads(cargo(burn, "metadata", "--format-version", "1"))
    after_tree = cargo(burn, "tree", "--edges", "normal,build", "--prefix", "none", "-f", "{p}")
    assert sorted(set(after_tree.splitlines())) == sorted(set(before_tree.splitlines()))
    assert len(after_meta["packages"]) < 0.6 * len(before_meta["packages"])
    assert not any(p["name"] in {"tch", "wgpu", "cudarc"} for p in after_meta["packages"])


def test_a_stand_in_has_its_originals_features_and_refuses_to_compile(tmp_path):
    stand_ins.write(tmp_path)
    folder = next((tmp_path / stand_ins.STAND_INS).glob("burn-wgpu-*"))
    manifest = tomllib.loads((folder / "Cargo.toml").read_text())
    original = next(Path.home().glob(f".cargo/registry/src/*/{folder.name}/Cargo.toml"))
    assert set(tomllib.loads(original.read_text())["features"]) <= set(manifest["features"])
    assert (folder / "src" / "lib.rs").read_text().startswith("compile_error!(")
    assert "COURSEKIT_STAND_INS=0" in (folder / "src" / "lib.rs").read_text()


def test_none_when_turned_off(tmp_path, monkeypatch):
    stand_ins.write(tmp_path)
    monkeypatch.setenv("COURSEKIT_STAND_INS", "0")
    assert stand_ins.write(tmp_path) == []
    assert stand_ins.patch_section(tmp_path) == ""
