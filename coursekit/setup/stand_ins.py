"""Empty stand-ins for crates the course's pins name but never compile, so that evcxr's
rust-analyzer does not load them.

evcxr's embedded rust-analyzer reads the crate graph from `cargo metadata`, whose resolve
lists every optional dependency a feature could turn on — for Burn's pins, its tch, CUDA,
ROCm, WGPU and Candle backends and their own trees (tch, wgpu, naga, cubecl, cudarc,
tokenizers, …): 484 packages where cargo builds about 220. rust-analyzer loads and indexes
them all, which took the kernel from 0.6 GB to 2.2 GB of memory at Burn's `:dep` cell, and
Binder gives a session 2 GB. A `[patch.crates-io]` in the build directories' cargo
configuration replaces each such crate that a compiled crate points at (the frontier of
the unused part) with an empty crate of the same name, version and features: cargo builds
exactly what it built before, and rust-analyzer sees the tree cargo builds.

A crate is replaced only if no framework of the course compiles it on any platform
(`cargo tree --target all` over all the pins together). Only the roots of large unused
trees are replaced (Burn's other backends and cubecl, today), never a small general-purpose
crate. A learner's own `:dep` that turns one on (Burn's `wgpu` feature, say) meets a compile
error that says so and how to go without stand-ins: `COURSEKIT_STAND_INS=0 coursekit setup`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

from .. import pins

STAND_INS = "stand-ins"  # under the pool's .cargo/ (the grading sandbox mounts that folder)


def _workspace(root: Path, deps: list[str]) -> Path:
    """A cargo project with these `:dep` lines."""
    manifest = ['[package]\nname = "course"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]']
    manifest += [line.removeprefix(":dep ") for line in deps]
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "src" / "lib.rs").write_text("")
    (root / "Cargo.toml").write_text("\n".join(manifest) + "\n")
    return root


def _cargo(root: Path, *args: str) -> str:
    return subprocess.run(
        ["cargo", *args], cwd=root, capture_output=True, text=True, check=True, timeout=900
    ).stdout


def _graphs(root: Path) -> tuple[dict, set[str]]:
    """`cargo metadata` of the project, and what cargo compiles of it on any platform
    ("name vX.Y.Z")."""
    meta = json.loads(_cargo(root, "metadata", "--format-version", "1"))
    tree = _cargo(
        root, "tree", "--target", "all", "-e", "normal,build", "--prefix", "none", "--format", "{p}"
    )
    return meta, {line.split(" (")[0].strip() for line in tree.splitlines() if line.strip()}


MIN_TREE = 10  # a stand-in where it spares rust-analyzer a tree of crates, not a leaf


def unused_trees(workdir: Path) -> list[dict]:
    """The roots of the unused trees: packages `cargo metadata` resolves for a framework's
    pins (each framework on its own, as notebooks use them: tch's and burn-tch's libtorch
    cannot share one graph) that no framework compiles, that a compiled package depends on,
    and that lead to at least MIN_TREE such packages. Each {name, version, manifest_path}."""
    extras = [
        line for name in pins.crates() if name not in pins.frameworks() for line in pins.dep_lines(name)
    ]
    graphs = [
        _graphs(_workspace(workdir / name, pins.dep_lines(name) + extras)) for name in pins.frameworks()
    ]
    compiled = set().union(*(built for _, built in graphs))
    compiled_names = {k.rsplit(" v", 1)[0] for k in compiled}
    roots, trees = {}, {}
    for meta, built in graphs:
        packages = {p["id"]: p for p in meta["packages"]}
        key = {pid: f"{p['name']} v{p['version']}" for pid, p in packages.items()}
        deps = {node["id"]: [d["pkg"] for d in node["deps"]] for node in meta["resolve"]["nodes"]}
        for pid, children in deps.items():
            if key[pid] not in built:
                continue
            for child in children:
                if key[child] in compiled:
                    continue
                roots[key[child]] = packages[child]
                unused, todo = trees.setdefault(key[child], set()), [child]
                while todo:
                    node = todo.pop()
                    if key[node] not in compiled and key[node] not in unused:
                        unused.add(key[node])
                        todo += deps.get(node, [])
    # [patch] names a crate, not a version: a name compiled in any version, or wanted in
    # two, keeps its real crate.
    names = [p["name"] for p in roots.values()]
    return [
        {"name": p["name"], "version": p["version"], "manifest_path": p["manifest_path"]}
        for k, p in sorted(roots.items())
        if len(trees[k]) >= MIN_TREE and names.count(p["name"]) == 1 and p["name"] not in compiled_names
    ]


def _stand_in(package: dict, dest: Path) -> None:
    """An empty library with the package's name, version and features (optional
    dependencies included, as cargo makes them features)."""
    original = tomllib.loads(Path(package["manifest_path"]).read_text())
    tables = [original.get("dependencies", {}), original.get("build-dependencies", {})]
    tables += [target.get("dependencies", {}) for target in original.get("target", {}).values()]
    features = set(original.get("features", {}))
    features |= {
        n for t in tables for n, spec in t.items() if isinstance(spec, dict) and spec.get("optional")
    }
    lines = [
        "# An empty stand-in written by coursekit (setup/stand_ins.py): never compiled by the course.",
        "[package]",
        f'name = "{package["name"]}"',
        f'version = "{package["version"]}"',
        'edition = "2021"',
        "",
        "[features]",
        *(f'"{f}" = []' for f in sorted(features)),
    ]
    (dest / "src").mkdir(parents=True)
    (dest / "src" / "lib.rs").write_text(
        f'compile_error!("{package["name"]} {package["version"]} is an empty stand-in: the course never '
        "compiles it, and coursekit replaced it so that evcxr's rust-analyzer does not load it "
        "(coursekit/setup/stand_ins.py). To use it, run `COURSEKIT_STAND_INS=0 coursekit setup`, "
        'then restart the kernel.");\n'
    )
    (dest / "Cargo.toml").write_text("\n".join(lines) + "\n")


def patch_section(cargo_dir: Path) -> str:
    """The `[patch.crates-io]` table of the stand-ins under `cargo_dir`, '' if none."""
    try:
        return (cargo_dir / STAND_INS / "patch.toml").read_text()
    except OSError:
        return ""


def write(cargo_dir: Path) -> list[str] | None:
    """The stand-ins for today's pins, with their patch table, under `cargo_dir/stand-ins`
    (none with COURSEKIT_STAND_INS=0); their names, or None when they were current."""
    dest = cargo_dir / STAND_INS
    if os.environ.get("COURSEKIT_STAND_INS") == "0":
        shutil.rmtree(dest, ignore_errors=True)
        return []
    key = hashlib.sha256(json.dumps(pins.crates(), sort_keys=True).encode()).hexdigest()[:16]
    if (dest / "key").is_file() and (dest / "key").read_text() == key:
        return None
    with tempfile.TemporaryDirectory(prefix="coursekit-pins-") as tmp:
        roots = unused_trees(Path(tmp))
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    patch = ["[patch.crates-io]"]
    for package in roots:
        folder = dest / f"{package['name']}-{package['version']}"
        _stand_in(package, folder)
        patch.append(f'{package["name"]} = {{ path = "{folder}" }}')
    (dest / "patch.toml").write_text("\n".join(patch) + "\n" if roots else "")
    (dest / "key").write_text(key)
    return [p["name"] for p in roots]
