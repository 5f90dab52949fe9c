"""The Rust standard-library sources that evcxr's embedded rust-analyzer reads.

rust-analyzer infers the type of every variable a cell keeps for the next cells from the
standard library's sources (`RUST_SRC_PATH`, a `library/` folder). Sources older than the
compiler break that for everyday code: with rustc 1.95 and Debian 12's 1.85 sources,
`let v = vec![1, 2];` fails with "Couldn't automatically determine type of variable".
Measured with rustc 1.95 by running two Part 1 lessons (49 cells) with each: the sources of
Rust 1.94, 1.95, 1.96 and 1.97 work, those of 1.85 fail 10 cells. Set-up accepts sources
from FITS_BEHIND releases before rustc's to FITS_AHEAD after it, and prefers rustc's own;
`coursekit doctor` proves the choice with a probe through the kernel.

Where the sources come from, first that works:
1. `RUST_SRC_PATH`, when set (a version that does not fit is an error, never ignored);
2. the toolchain's own `rust-src` component (rustup), or installed packaged sources
   (`/usr/src/rustc-X.Y.Z/library`, e.g. Debian's `rust-web-src`) whose version fits;
3. sources unpacked earlier into the kit's cache (~/.cache/coursekit/rust-src/X.Y.Z);
4. `rustup component add rust-src`, where rustup can download;
5. Debian's architecture-independent `rust-src`/`rust-web-src` package of a fitting
   version, downloaded over HTTPS from the Debian archive (its signed InRelease checked
   with `gpgv` where Debian's keyring is installed; the package checked against the
   index's SHA256)
   and unpacked into the cache: nothing is installed system-wide, and it works on any OS.
Otherwise set-up stops with the versions involved and the fix.

The kernels read a lean copy of the chosen sources (`lean()`): rust-analyzer loads the whole
standard library at every kernel start, and a third of it is x86 SIMD intrinsics no course
cell names. Measured on the 2-core machine by `coursekit bench --only startup` (kernel start
to the first framework cell's result, one run each, 2026-12-04), full sources -> lean copy:
tch 19.5 s -> 13.7 s, Candle 18.0 -> 15.1, Burn 30.7 -> 24.2, DFDX 18.4 -> 13.7.
rustc never reads these sources: it compiles against the toolchain's own std.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .. import pins

FITS_BEHIND, FITS_AHEAD = 1, 2  # releases around rustc's that work (measured, see above)
MIRROR = os.environ.get("COURSEKIT_DEBIAN_MIRROR", "https://deb.debian.org/debian")
# Suites searched in this order; the small backports indexes first.
SUITES = ("trixie-backports", "bookworm-backports", "trixie", "forky", "sid")
PACKAGES = ("rust-src", "rust-web-src")
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
VERSION_FILE = "coursekit-rust-src-version"
ORIGIN_FILE = "coursekit-rust-src-origin"  # written last: a folder with it is complete
LEAN_FORMAT = "1"  # bump when lean() changes what it leaves out
# Intrinsics modules of core::arch for x86: their files are emptied, their mod.rs and
# macros.rs kept, so `core::arch::x86_64` still exists (as an almost empty module).
INTRINSICS = ("stdarch/crates/core_arch/src/x86", "stdarch/crates/core_arch/src/x86_64")
KEEP = ("mod.rs", "macros.rs")


class SourcesError(RuntimeError):
    """No fitting sources, or sources that do not fit: the message says what to do."""


@dataclass(frozen=True)
class Sources:
    library: Path  # the folder RUST_SRC_PATH names (it holds core/src/lib.rs)
    version: str | None  # X.Y.Z, None when it cannot be told
    origin: str  # where they came from, for the set-up log and doctor


def rustc_version() -> str:
    """The active rustc's version, X.Y.Z."""
    version = pins.rustc_version()
    if not version:
        raise SourcesError("rustc does not run: install Rust with rustup (https://rustup.rs) first")
    return version


def _minor(version: str) -> tuple[int, int]:
    major, minor, *_ = (int(x) for x in version.split("."))
    return major, minor


def fits(sources: str, rustc: str) -> bool:
    """Sources of rustc's release, or of one close enough to it."""
    (smaj, smin), (rmaj, rmin) = _minor(sources), _minor(rustc)
    return smaj == rmaj and rmin - FITS_BEHIND <= smin <= rmin + FITS_AHEAD


def _window(rustc: str) -> str:
    major, minor = _minor(rustc)
    return f"Rust {major}.{minor - FITS_BEHIND} to {major}.{minor + FITS_AHEAD}"


def _closeness(sources: str, rustc: str) -> tuple[int, int]:
    """Sorts rustc's own release first, then newer ones, then older ones."""
    distance = _minor(sources)[1] - _minor(rustc)[1]
    return (abs(distance) + (distance < 0), distance)


def is_library(path: Path) -> bool:
    return (path / "core" / "src" / "lib.rs").is_file()


def _sysroot() -> Path | None:
    try:
        out = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 else None


def component_library() -> Path | None:
    """Where rustup's rust-src component puts the sources of the active toolchain."""
    sysroot = _sysroot()
    return sysroot / "lib" / "rustlib" / "src" / "rust" / "library" if sysroot else None


def version_of(library: Path) -> str | None:
    """The release a `library/` folder belongs to: the kit's marker file, a `rustc-X.Y.Z`
    folder above it (Debian), or the active toolchain's version for its rust-src component."""
    marker = library / VERSION_FILE
    if marker.is_file():
        return marker.read_text().strip()
    for part in reversed(library.resolve().parts):
        m = re.fullmatch(r"rustc-(\d+\.\d+\.\d+)", part)
        if m:
            return m.group(1)
    component = component_library()
    if component is not None and library.resolve() == component.resolve():
        return rustc_version()
    return None


def cache_dir() -> Path:
    from .slots import cache_dir as kit_cache

    return kit_cache() / "rust-src"


def _mismatch(what: str, have: str | None, rustc: str) -> str:
    return (
        f"{what} holds Rust {have or 'sources of unknown version'}, but rustc is {rustc}: evcxr needs the "
        f"standard library's sources of {_window(rustc)}"
    )


def find(rustc: str | None = None) -> Sources | None:
    """Fitting sources already on this machine (steps 1-3 above), or None."""
    rustc = rustc or rustc_version()
    env = os.environ.get("RUST_SRC_PATH")
    if env:
        library = Path(env)
        if not is_library(library):
            raise SourcesError(
                f"RUST_SRC_PATH={env} has no core/src/lib.rs: unset it or point it at a `library` folder"
            )
        have = version_of(library)
        if have is None or not fits(have, rustc):
            raise SourcesError(_mismatch(f"RUST_SRC_PATH={env}", have, rustc) + "; unset RUST_SRC_PATH")
        return Sources(library, have, "RUST_SRC_PATH")
    candidates = []
    component = component_library()
    if component is not None:
        candidates.append((component, "the toolchain's rust-src component"))
    candidates += [(Path(p), "packaged sources") for p in sorted(Path("/usr/src").glob("rustc-*/library"))]
    candidates += [(p, "the kit's cache") for p in sorted(cache_dir().glob("*/library"))]
    fitting = []
    for library, origin in candidates:
        have = version_of(library) if is_library(library) else None
        if have is not None and fits(have, rustc):
            fitting.append(Sources(library, have, f"{origin} ({library})"))
    return min(fitting, key=lambda s: _closeness(s.version, rustc), default=None)


def ensure(log=print, rustc: str | None = None) -> Sources:
    """Fitting sources, fetched if needed (steps 4-5); SourcesError if there are none."""
    rustc = rustc or rustc_version()
    found = find(rustc)
    if found and found.version == rustc:
        return found
    tried = []
    if shutil.which("rustup") and component_library() is not None:
        log("adding rustup's rust-src component (the standard library's sources evcxr needs)")
        try:
            result = subprocess.run(
                ["rustup", "component", "add", "rust-src"], capture_output=True, text=True, timeout=180
            )
            failure = (result.stderr.strip().splitlines() or ["?"])[-1] if result.returncode else None
        except subprocess.TimeoutExpired:
            failure = "no answer in 180 s"
        library = component_library()
        if failure is None and library is not None and is_library(library):
            return Sources(library, rustc, "the toolchain's rust-src component, just added")
        tried.append(f"`rustup component add rust-src` failed: {failure}")
    if found:  # close enough to rustc's release
        return found
    try:
        return download(rustc, log)
    except (OSError, SourcesError, ValueError, lzma.LZMAError, tarfile.TarError) as exc:
        tried.append(f"the Debian archive ({MIRROR}): {exc}")
    raise SourcesError(
        f"no standard-library sources for rustc {rustc} (evcxr needs those of {_window(rustc)}). Tried: "
        + "; ".join(tried)
        + ". Fix: `rustup component add rust-src` "
        "where rustup can download, or set RUST_SRC_PATH to the `library` folder of Rust "
        f"{rustc}'s sources (its rust-src tarball from https://static.rust-lang.org), then run set-up again"
    )


@contextlib.contextmanager
def _building(dest: Path):
    """A new folder beside `dest` to build in; it replaces `dest` when the block ends without
    error, and is removed otherwise, so `dest` is never seen half-built."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        yield tmp
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _mark(library: Path, version: str | None, origin: str) -> None:
    """The kit's marker files (version_of reads the first); replaced, never written through,
    as they may be hard links to the sources' own."""
    for name, text in ((VERSION_FILE, version), (ORIGIN_FILE, origin)):
        (library / name).unlink(missing_ok=True)
        if text:
            (library / name).write_text(text + "\n")


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)  # the same bytes, no second copy on disk
    except OSError:
        shutil.copy2(src, dst)


def lean(sources: Sources, log=print) -> Path:
    """A copy of `sources` for rust-analyzer that leaves out what no course cell uses: the
    bodies of x86's SIMD intrinsics (8 MB of the ~23 MB of Rust 1.95's sources it reads), and
    library/Cargo.toml and Cargo.lock, whose absence makes rust-analyzer take the standard
    crates by their known paths instead of running `cargo metadata` on the library's
    workspace and loading its external dependencies (gimli, object, hashbrown...).
    Built once per sources, version and LEAN_FORMAT, in the kit's cache; files are
    hard-linked where the file system allows. Where it cannot be built (a full disk, say),
    the sources themselves, which work, only slower."""
    key = hashlib.sha256(f"{sources.library.resolve()}|{sources.version}|{LEAN_FORMAT}".encode()).hexdigest()
    dest = cache_dir() / "lean" / f"{sources.version or 'unknown'}-{key[:12]}"
    if (dest / "library" / ORIGIN_FILE).is_file():
        return dest / "library"
    try:
        with _building(dest) as tmp:
            library = tmp / "library"
            shutil.copytree(sources.library, library, symlinks=True, copy_function=_link_or_copy)
            for name in ("Cargo.toml", "Cargo.lock"):
                (library / name).unlink(missing_ok=True)
            for folder in INTRINSICS:
                for f in (library / folder).glob("*.rs"):
                    if f.name not in KEEP:
                        f.unlink()  # a hard link: never write through it
                        f.write_text("")
            _mark(library, sources.version, f"lean copy of {sources.library}")
    except OSError as exc:
        log(f"warning: no lean copy of the std sources ({exc}); the kernels read them whole (slower starts)")
        return sources.library
    return dest / "library"


def prune_lean(rustc: str) -> list[tuple[Path, int]]:
    """Remove the lean copies whose sources no longer fit rustc (left by an older toolchain);
    returns what was removed and its size (`coursekit clean`)."""
    from .slots import size

    removed = []
    for copy in sorted((cache_dir() / "lean").glob("*")):
        have = version_of(copy / "library") if is_library(copy / "library") else None
        if have is None or not fits(have, rustc):
            removed.append((copy, size(copy)))
            shutil.rmtree(copy, ignore_errors=True)
    return removed


# -- the Debian archive ------------------------------------------------------------------
def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 (https URL of the archive)
        return response.read()


def _release_hashes(suite: str) -> dict[str, str]:
    """path -> SHA256 from the suite's InRelease, whose signature gpgv checks where it can."""
    signed = _get(f"{MIRROR}/dists/{suite}/InRelease")
    if shutil.which("gpgv") and KEYRING.is_file():
        with tempfile.NamedTemporaryFile(suffix=".InRelease") as f:
            f.write(signed)
            f.flush()
            check = subprocess.run(
                ["gpgv", "--keyring", str(KEYRING), f.name], capture_output=True, text=True
            )
        if check.returncode:
            raise SourcesError(
                f"the signature of {suite}'s InRelease does not verify: {check.stderr.strip()[-300:]}"
            )
    hashes, in_sha256 = {}, False
    for line in signed.decode("utf-8", "replace").splitlines():
        if line.startswith("SHA256:"):
            in_sha256 = True
        elif in_sha256 and line.startswith(" "):
            digest, _, path = line.split()
            hashes[path] = digest
        else:
            in_sha256 = False
    return hashes


def _stanzas(text: str):
    for block in text.split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", block, re.M))
        if fields:
            yield fields


def upstream(debian_version: str) -> str:
    """1.95.0+dfsg1-2~bpo13+1 -> 1.95.0"""
    return re.split(r"[+~-]", debian_version.split(":")[-1])[0]


def candidates(suite: str, rustc: str, log=print) -> list[dict]:
    """The suite's source packages that fit rustc, closest release first."""
    index = "main/binary-all/Packages.xz"
    digest = _release_hashes(suite).get(index)
    data = _get(f"{MIRROR}/dists/{suite}/{index}")
    if digest != hashlib.sha256(data).hexdigest():
        # A mirror being updated, or a caching proxy, can serve an index newer or older than
        # its InRelease: the package's own hash (below) then rests on HTTPS alone.
        log(f"  note: {suite}'s {index} does not match its InRelease; trusting HTTPS for it")
    found = []
    for fields in _stanzas(lzma.decompress(data).decode("utf-8", "replace")):
        if fields.get("Package") in PACKAGES and fits(upstream(fields.get("Version", "0.0")), rustc):
            found.append(fields)
    return sorted(found, key=lambda f: _closeness(upstream(f["Version"]), rustc))


def download(rustc: str, log=print) -> Sources:
    """Fetch, verify and unpack a fitting Debian source package into the cache."""
    for suite in SUITES:
        try:
            found = candidates(suite, rustc, log)
        except (OSError, SourcesError) as exc:
            log(f"  {suite}: {exc}")
            continue
        if not found:
            continue
        fields = found[0]
        url = f"{MIRROR}/{fields['Filename']}"
        log(f"downloading Rust {upstream(fields['Version'])} standard-library sources from {url}")
        deb = _get(url)
        if hashlib.sha256(deb).hexdigest() != fields.get("SHA256"):
            raise SourcesError(f"{url} does not match the hash in the archive's index")
        return unpack(deb, upstream(fields["Version"]), url)
    raise SourcesError(f"no rust-src or rust-web-src package fitting rustc {rustc} in {', '.join(SUITES)}")


def ar_members(data: bytes) -> dict[str, bytes]:
    """The members of an `ar` archive (a .deb)."""
    if not data.startswith(b"!<arch>\n"):
        raise SourcesError("not a .deb (ar) archive")
    members, pos = {}, 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        members[name] = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
    return members


def unpack(deb: bytes, version: str, origin: str) -> Sources:
    """Extract the package's `usr/src/rustc-*/library` into cache_dir()/VERSION/library."""
    members = ar_members(deb)
    name = next((n for n in members if n.startswith("data.tar")), None)
    if name is None:
        raise SourcesError("the package has no data.tar member")
    dest = cache_dir() / version
    with _building(dest) as tmp:
        with tarfile.open(fileobj=io.BytesIO(members[name])) as tar:
            prefix = re.compile(r"^\.?/?usr/src/rustc-[^/]+/library/")
            picked = []
            for info in tar.getmembers():
                if prefix.match(info.name):
                    info.name = "library/" + prefix.sub("", info.name)
                    picked.append(info)
            tar.extractall(tmp, members=picked, filter="data")
        library = tmp / "library"
        if not is_library(library):
            raise SourcesError("the package holds no library/core/src/lib.rs")
        _mark(library, version, origin)
    return Sources(dest / "library", version, f"Debian's package, unpacked into {dest} ({origin})")
