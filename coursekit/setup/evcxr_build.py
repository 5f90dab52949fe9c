"""Building evcxr_jupyter: minutes of CPU on a fresh machine.

The pinned evcxr_jupyter is built from crates.io's sources of it and of evcxr, with the
course's change to evcxr (`evcxr.patch`: its rust-analyzer indexes a new crate graph on all
cores; applied here, no git needed) and evcxr_jupyter's own Cargo.lock, so every other
crate is the one upstream tested. The installed version carries the hash of the patch's
diff (`0.22.0+coursekit.<hash>`): a changed patch builds again.

`make` starts the build in the background before it installs the Python packages
(`python -m coursekit.setup.evcxr_build --background`, the standard library only: the
virtual environment does not exist yet), so the two overlap; `coursekit setup` then waits for
it, and builds in the foreground when no build ran or the background one failed. A lock
keeps two builds from running at once.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from .. import pins
from .slots import cache_dir, lock_file

PATCH = Path(__file__).with_name("evcxr.patch")
CRATES = "https://static.crates.io/crates"  # where cargo downloads crates.io's crates from


class BuildError(RuntimeError):
    """The build failed: its sources or cargo (the reason was shown)."""


def binary() -> Path:
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    return cargo_home / "bin" / "evcxr_jupyter"


def installed_version() -> str | None:
    """The version `cargo install` recorded (evcxr_jupyter has no --version)."""
    if not binary().is_file():
        return None
    try:
        listed = subprocess.run(["cargo", "install", "--list"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in listed.stdout.splitlines():
        if line.startswith("evcxr_jupyter v"):
            return line.split()[1].lstrip("v").rstrip(":")
    return None


def wanted_version() -> str:
    """The pinned version, marked with the patch it was built with (its diff, not its prose)."""
    diff = PATCH.read_text()
    diff = diff[diff.index("\n--- ") + 1 :]
    return f"{pins.evcxr_version()}+coursekit.{hashlib.sha256(diff.encode()).hexdigest()[:12]}"


def _crate(name: str) -> bytes:
    """The pinned version of one of the two crates, checked against pins.toml (kept in the cache)."""
    version, sha256 = pins.evcxr_version(), pins.pins()["evcxr"]["sha256"][name]
    kept = cache_dir() / "crates" / f"{name}-{version}.crate"
    data = kept.read_bytes() if kept.is_file() else b""
    if hashlib.sha256(data).hexdigest() == sha256:
        return data
    url = f"{CRATES}/{name}/{name}-{version}.crate"
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
    except OSError as exc:
        raise BuildError(f"could not download {url}: {exc}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise BuildError(f"{url} is not the pinned crate: its SHA-256 differs from pins.toml's")
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_bytes(data)
    return data


def _sources(into: Path) -> Path:
    """evcxr_jupyter's sources, set to build against the patched evcxr beside them."""
    version = pins.evcxr_version()
    for name in ("evcxr", "evcxr_jupyter"):
        with tarfile.open(fileobj=io.BytesIO(_crate(name))) as crate:
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.11.4
            crate.extractall(into, **safe)
    evcxr, jupyter = into / f"evcxr-{version}", into / f"evcxr_jupyter-{version}"
    try:
        _apply(PATCH.read_text(), evcxr)
    except (BuildError, OSError) as exc:
        raise BuildError(f"evcxr.patch does not apply to evcxr {version}: {exc}") from None
    manifest, lock = jupyter / "Cargo.toml", jupyter / "Cargo.lock"
    package = f'name = "evcxr_jupyter"\nversion = "{version}"'
    marked = f'name = "evcxr_jupyter"\nversion = "{wanted_version()}"'
    evcxr_locked = f'name = "evcxr"\nversion = "{version}"\n'
    text = lock.read_text()
    start = text.index(evcxr_locked) + len(evcxr_locked)
    end = text.index("dependencies = [", start)  # drop its source and checksum: a path now
    lock.write_text((text[:start] + text[end:]).replace(package, marked))
    manifest.write_text(
        manifest.read_text().replace(package, marked)
        + f'\n[patch.crates-io]\nevcxr = {{ path = "../evcxr-{version}" }}\n'
    )
    return jupyter


def _apply(patch: str, root: Path) -> None:
    """Apply a unified diff to the files under `root`, its context matching exactly (what
    `patch -p1` does without fuzz; no git or patch command needed)."""
    lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1  # the patch's description
            continue
        name = lines[i + 1][4:].split("\t")[0].strip().removeprefix("b/")
        path, i, shift = root / name, i + 2, 0
        text = path.read_text().splitlines(keepends=True)
        while i < len(lines) and lines[i].startswith("@@ "):
            start, old_n, new_n = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@", lines[i]).groups()
            at, old, new, i = int(start) - 1 + shift, [], [], i + 1
            # the header's line counts end the hunk (a next file's `--- ` line is no deletion)
            while (len(old), len(new)) != (int(old_n or 1), int(new_n or 1)):
                if i == len(lines) or lines[i][:1] not in (" ", "-", "+", "\n"):
                    raise BuildError(f"{name}: a hunk is shorter than its header says")
                tag, body = lines[i][:1], lines[i][1:] or "\n"  # an empty line: blank context
                if tag != "+":
                    old.append(body)
                if tag != "-":
                    new.append(body)
                i += 1
            if text[at : at + len(old)] != old:
                raise BuildError(f"{name}: the lines from {at + 1} on are not the patch's")
            text[at : at + len(old)] = new
            shift += len(new) - len(old)
        path.write_text("".join(text))


def _build() -> int:
    """Build and install it (cargo's output shown); cargo's exit status."""
    with tempfile.TemporaryDirectory(prefix="coursekit-evcxr-") as tmp:
        try:
            jupyter = _sources(Path(tmp))
        except BuildError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 1
        command = ["cargo", "install", "--locked", "--force", "--path", str(jupyter)]
        return subprocess.run([*command, "--target-dir", str(Path(tmp) / "target")]).returncode


def _log_file() -> Path:
    return cache_dir() / "evcxr-build.log"


def _locked(wait: bool) -> int | None:
    cache_dir().mkdir(parents=True, exist_ok=True)
    return lock_file(cache_dir() / "evcxr-build.lock", wait)


def ensure(log) -> Path:
    """The pinned, patched evcxr_jupyter, built (or waited for) when missing or another version."""
    fd = _locked(wait=False)
    if fd is None:
        log(f"waiting for the evcxr_jupyter build that started in the background (its output: {_log_file()})")
        fd = _locked(wait=True)
    try:
        if installed_version() != wanted_version():
            if _log_file().is_file():
                log(f"the background build did not install it; its output is in {_log_file()}")
            log(f"building evcxr_jupyter {wanted_version()} (about 6-10 minutes on 2 cores)")
            if _build():
                raise BuildError(f"building evcxr_jupyter {wanted_version()} failed; see its output above")
        _log_file().unlink(missing_ok=True)
    finally:
        os.close(fd)
    return binary()


def background() -> None:
    """Start the build in a detached process that holds the lock, and return once it does
    (at once when evcxr_jupyter is already built, another build runs, or cargo is missing)."""
    if not shutil.which("cargo") or installed_version() == wanted_version():
        return
    ready_r, ready_w = os.pipe()
    if os.fork():
        os.close(ready_w)
        if os.read(ready_r, 1):
            print(f"[coursekit setup] building evcxr_jupyter in the background: {_log_file()}", flush=True)
        return
    os.close(ready_r)
    os.setsid()  # neither make's end nor a Ctrl-C stops it; a later setup waits for it
    fd = _locked(wait=False)
    if fd is not None:
        os.write(ready_w, b"1")
    os.close(ready_w)
    if fd is None:
        os._exit(0)
    with open(os.devnull, "rb") as null, open(_log_file(), "wb") as out:
        for std, f in ((0, null), (1, out), (2, out)):
            os.dup2(f.fileno(), std)
    os._exit(_build())


if __name__ == "__main__":
    if sys.argv[1:] != ["--background"]:
        sys.exit("usage: python -m coursekit.setup.evcxr_build --background")
    background()
