"""`coursekit setup`: install and configure what the kernels need. Idempotent: each step
checks first, so a second run takes seconds. `make lab`, `make test` and binder/postBuild
all run it.

Steps: the Debian helpers of the purpose (none for a learner), the Rust standard-library
sources evcxr's analyzer needs (setup/rust_src.py), evcxr_jupyter, the evcxr configuration
(dependency cache, prelude), both kernelspecs and the JupyterLab extension that highlights
`%%python` cells (written into this Python environment, not the user's home), stand-ins
for crates the pins never compile (setup/stand_ins.py); then
`coursekit setup` runs the prewarm (setup/prewarm.py).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import pins
from ..kernel.evcxr_child import VALID_DEPS, evcxr_argv, kernels_dir
from . import evcxr_build, rust_src

# Debian packages by purpose: a learner needs none (`make lab`); the test suite and an
# instructor's grading need more (`coursekit setup --for tests|grading`, `make test`).
APT_PACKAGES = {
    "mold": "a faster linker, which evcxr uses automatically",
    "ccache": "caches the C/C++ parts of crate builds (tch's libtorch shim)",
    "bubblewrap": "the sandbox that grading runs untrusted submissions in",
    "chromium": "the browser for the end-to-end JupyterLab test",
}
PURPOSES = {
    "learner": [],
    "grading": ["bubblewrap"],
    "tests": ["bubblewrap", "chromium", "mold", "ccache"],
}


class SetupError(RuntimeError):
    """A step that failed, with what to do about it."""


def log(msg: str) -> None:
    print(f"[coursekit setup] {msg}", flush=True)


# -- Debian packages -------------------------------------------------------------------------
def _missing_debs(packages: list[str]) -> list[str]:
    """The packages not installed (`dpkg -s` also knows one removed but not purged)."""
    query = ["dpkg-query", "--show", "--showformat=${db:Status-Status}"]
    return [
        p
        for p in packages
        if subprocess.run([*query, p], capture_output=True, text=True).stdout != "installed"
    ]


def _available(package: str) -> bool:
    """apt knows a candidate version of the package (Ubuntu's chromium, for one, is a snap)."""
    out = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True).stdout
    return "Candidate:" in out and "Candidate: (none)" not in out


def apt_install(packages: list[str]) -> list[str]:
    """Install the missing Debian packages (as root, or with passwordless sudo); return the
    ones still missing."""
    if not shutil.which("dpkg"):
        return packages
    missing = _missing_debs(packages)
    if not missing or not shutil.which("apt-get") or (os.geteuid() != 0 and not shutil.which("sudo")):
        return missing
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not all(_available(p) for p in missing):
        subprocess.run(sudo + ["apt-get", "update", "-q"], env=env, capture_output=True)
    installable = [p for p in missing if _available(p)]
    if installable:
        log(f"installing Debian packages: {', '.join(installable)}")
        cmd = sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", *installable]
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
    return _missing_debs(missing)


def ensure_system_packages(purpose: str) -> None:
    """The Debian helpers this purpose needs; say how to get the ones that could not be
    installed (each only makes a feature slower or unavailable)."""
    debian = bool(shutil.which("dpkg"))
    for p in apt_install(PURPOSES[purpose]):
        if debian:
            how = f"install it (Debian: `sudo apt-get install {p}`)"
        elif p == "bubblewrap" and sys.platform != "linux":
            how = "it exists on Linux only: grade untrusted notebooks on a Linux machine"
        else:
            how = f"install it with your system's package manager (package `{p}`)"
        log(f"warning: {p} is missing ({APT_PACKAGES[p]}): {how}")


def ensure_rust_src() -> Path:
    try:
        found = rust_src.ensure(log)
    except rust_src.SourcesError as exc:
        raise SetupError(str(exc)) from None
    log(f"Rust standard-library sources {found.version}: {found.origin}")
    library = rust_src.lean(found, log)
    if library != found.library:
        log(f"  the kernels' rust-analyzer reads a lean copy of them: {library}")
    return library


# -- evcxr ---------------------------------------------------------------------------------
def ensure_evcxr() -> Path:
    try:
        return evcxr_build.ensure(log)
    except evcxr_build.BuildError as exc:
        raise SetupError(str(exc)) from None


# -- configuration -------------------------------------------------------------------------
def share_dir() -> Path:
    return Path(sys.prefix) / "share" / "coursekit"


def evcxr_config_dir(prelude: bool) -> Path:
    """evcxr's configuration: the course kernel's has the prelude, the plain kernel's not."""
    return share_dir() / ("evcxr" if prelude else "evcxr-plain")


def write_evcxr_config() -> None:
    # Cells compile without optimisation (evcxr's default is 2); a notebook may say `:opt 1`.
    init = f":cache {pins.pins()['evcxr']['cache_mib']}\n:opt 0\n"
    prelude_crate = pins.PACKAGE / "kernel" / "prelude"
    for prelude in (False, True):
        d = evcxr_config_dir(prelude)
        d.mkdir(parents=True, exist_ok=True)
        if prelude:
            prelude_dep = f'coursekit_prelude = {{ path = "{prelude_crate}" }}'
            (d / "init.evcxr").write_text(init + f":dep {prelude_dep}\n")
            shutil.copyfile(pins.PACKAGE / "kernel" / "prelude.rs", d / "prelude.rs")
            # what evcxr need not check with a `cargo metadata` of its own (evcxr.patch)
            pinned = [line.removeprefix(":dep ") for name in pins.crates() for line in pins.dep_lines(name)]
            (d / VALID_DEPS).write_text("\n".join([prelude_dep, *pinned]) + "\n")
        else:
            (d / "init.evcxr").write_text(init)


@functools.cache
def torch_lib_dir() -> Path:
    import torch  # noqa: PLC0415 (slow import, only needed here)

    return Path(torch.__file__).parent / "lib"


def kernel_env(std_sources: Path, evcxr: Path, prelude: bool) -> dict[str, str]:
    """The environment a kernel runs with (the course kernel passes it on to evcxr)."""
    cargo = shutil.which("cargo")
    if not cargo:
        raise SetupError("cargo is not on PATH; install Rust with rustup first")
    path = [str(Path(sys.prefix) / "bin"), str(Path(cargo).parent)]
    path += [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in path]
    # libstd of the toolchain: evcxr moves each cell's library after rustc wrote a relative
    # RUNPATH for it, which then misses libstd when the build directory is under $HOME.
    libstd = subprocess.run(
        ["rustc", "--print", "target-libdir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    lib = [str(torch_lib_dir()), libstd]
    if os.environ.get("CONDA_PREFIX") or (Path(sys.prefix) / "conda-meta").is_dir():
        lib.append(str(Path(sys.prefix) / "lib"))
    env = {
        "PATH": os.pathsep.join(path),
        "RUST_SRC_PATH": str(std_sources),
        "EVCXR_CONFIG_DIR": str(evcxr_config_dir(prelude)),
        "COURSEKIT_EVCXR": str(evcxr),
        # Any value turns the mode on; torch-sys re-runs its build script only when this value
        # changes, so naming this environment's torch makes a clone elsewhere rebuild instead of
        # linking against another (perhaps deleted) environment's libtorch.
        "LIBTORCH_USE_PYTORCH": str(torch_lib_dir()),
        "LD_LIBRARY_PATH": os.pathsep.join(lib),
        "RUST_BACKTRACE": "0",
        # evcxr sets RUST_BACKTRACE=1 for the code it runs; this keeps error values (anyhow's,
        # Candle's) free of backtraces, whose frames change from run to run.
        "RUST_LIB_BACKTRACE": "0",
        # evcxr's allocator (mimalloc) hands freed memory back to the system at once: less
        # resident memory for the same work, which Binder's 2 GB needs.
        "MIMALLOC_PURGE_DELAY": "0",
    }
    if shutil.which("ccache"):
        env["CC"] = "ccache cc"
        env["CXX"] = "ccache c++"
    return env


def write_kernelspecs(evcxr: Path, std_sources: Path) -> None:
    base = Path(kernels_dir())
    specs = {
        "rust": {
            "argv": evcxr_argv(str(evcxr)),
            "display_name": "Rust",
            "language": "rust",
            "interrupt_mode": "message",
            "env": kernel_env(std_sources, evcxr, prelude=False),
        },
        "rust-pytorch": {
            "argv": [sys.executable, "-m", "coursekit.kernel", "-f", "{connection_file}"],
            "display_name": "Rust + PyTorch",
            "language": "rust",
            "interrupt_mode": "signal",
            "env": kernel_env(std_sources, evcxr, prelude=True),
            "metadata": {"debugger": False},
        },
    }
    for name, spec in specs.items():
        d = base / name
        d.mkdir(parents=True, exist_ok=True)
        text = json.dumps(spec, indent=1) + "\n"
        if not (d / "kernel.json").is_file() or (d / "kernel.json").read_text() != text:
            (d / "kernel.json").write_text(text)
            log(f"kernelspec {name} -> {d}")
        for logo in ("logo-32x32.png", "logo-64x64.png"):
            shutil.copyfile(pins.PACKAGE / "kernel" / "logos" / logo, d / logo)


def write_lab_settings() -> None:
    """JupyterLab defaults for the course: no news pop-up, no update check, and closing a
    notebook shuts its kernel down (a Rust kernel holds its compiler and analyzer: 1-3 GiB)."""
    d = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings"
    d.mkdir(parents=True, exist_ok=True)
    overrides = {
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension:tracker": {"kernelShutdown": True},
    }
    (d / "overrides.json").write_text(json.dumps(overrides, indent=1) + "\n")


LABEXTENSION = pins.PACKAGE / "kernel" / "highlight" / "labextension"


def write_labextension() -> None:
    """The prebuilt JupyterLab extension that highlights `%%python` cells as Python
    (coursekit/kernel/highlight; no Node.js needed here), into this environment's
    labextensions folder, where JupyterLab finds it."""
    d = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "coursekit-rust-pytorch"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(LABEXTENSION, d)


def write_stand_ins() -> None:
    """Empty stand-ins for the crates the pins name but never compile (setup/stand_ins.py),
    in the warm build directories' cargo configuration."""
    from . import slots, stand_ins

    cargo_dir = slots.ensure_pool() / ".cargo"
    try:
        names = stand_ins.write(cargo_dir)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        log(f"warning: no stand-ins for crates the pins never compile ({exc}): Burn needs more memory")
        return
    slots.ensure_pool()  # the configuration names them
    if names is not None:
        log(f"stand-ins for crates the pins never compile (for rust-analyzer): {', '.join(names) or 'none'}")


def setup(purpose: str = "learner") -> None:
    """Everything but the prewarm (setup/prewarm.py), which needs the kernels written here.
    evcxr_jupyter compiles (minutes of CPU on a fresh machine; `make` starts it before pip,
    setup/evcxr_build.py) while the Debian packages and the standard-library sources download."""
    with ThreadPoolExecutor(1) as building:
        evcxr_built = building.submit(ensure_evcxr)
        ensure_system_packages(purpose)
        std_sources = ensure_rust_src()
        evcxr = evcxr_built.result()
    write_evcxr_config()
    write_kernelspecs(evcxr, std_sources)
    write_lab_settings()
    write_labextension()
    write_stand_ins()
