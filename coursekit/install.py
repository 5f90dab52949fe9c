"""`coursekit setup`: install and configure what the kernels need. Idempotent: each step
checks first, so a second run takes seconds. `make lab`, `make test` and binder/postBuild
all run it.

Steps: Rust standard-library sources (evcxr's analyzer needs them), evcxr_jupyter, helper
Debian packages, the evcxr configuration (dependency cache, prelude), both kernelspecs
(written into this Python environment, not the user's home), and the prewarm.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import pins
from .evcxr_child import kernels_dir

APT_PACKAGES = {
    "rust-web-src": "Rust standard-library sources for evcxr's analyzer (rustup cannot fetch rust-src here)",
    "mold": "a faster linker, which evcxr uses automatically",
    "ccache": "caches the C/C++ parts of crate builds (tch's libtorch shim)",
    "bubblewrap": "the sandbox that grading runs untrusted submissions in",
    "chromium": "the browser for the end-to-end JupyterLab test",
}


class SetupError(RuntimeError):
    """A step that failed, with what to do about it."""


def log(msg: str) -> None:
    print(f"[coursekit setup] {msg}", flush=True)


# -- Rust standard-library sources --------------------------------------------------------
def find_rust_src() -> Path | None:
    """A `library/` directory with core's sources, as rust-analyzer wants."""
    candidates = []
    if os.environ.get("RUST_SRC_PATH"):
        candidates.append(os.environ["RUST_SRC_PATH"])
    try:
        sysroot = subprocess.run(
            ["rustc", "--print", "sysroot"], capture_output=True, text=True, check=True
        ).stdout.strip()
        candidates.append(os.path.join(sysroot, "lib", "rustlib", "src", "rust", "library"))
    except (OSError, subprocess.CalledProcessError):
        pass
    candidates += sorted(glob.glob("/usr/src/rustc-*/library"), reverse=True)
    for c in candidates:
        if (Path(c) / "core" / "src" / "lib.rs").is_file():
            return Path(c)
    return None


def _missing_debs(packages: list[str]) -> list[str]:
    return [p for p in packages if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode]


def apt_install(packages: list[str]) -> bool:
    """Install the missing Debian packages (as root, or with passwordless sudo); True if
    they are all there afterwards."""
    missing = _missing_debs(packages)
    if not missing:
        return True
    if not shutil.which("apt-get") or (os.geteuid() != 0 and not shutil.which("sudo")):
        return False
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    log(f"installing Debian packages: {', '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    if subprocess.run(cmd, env=env).returncode:
        subprocess.run(sudo + ["apt-get", "update", "-q"], env=env)
        subprocess.run(cmd, env=env)
    return not _missing_debs(missing)


def ensure_system_packages() -> Path:
    """Install the Debian helpers that are missing; return the std-sources directory.
    Only the std sources are required: without a helper its feature is slower or skipped."""
    if shutil.which("dpkg"):
        wanted = [p for p in APT_PACKAGES if p != "rust-web-src" or find_rust_src() is None]
        if not apt_install(wanted):
            for p in _missing_debs(wanted):
                log(
                    f"warning: Debian package {p} is missing ({APT_PACKAGES[p]}); "
                    f"install it with `sudo apt-get install {p}`"
                )
    src = find_rust_src()
    if src is None:
        raise SetupError(
            "no Rust standard-library sources: run `rustup component add rust-src`, "
            "or on Debian `sudo apt-get install rust-web-src`"
        )
    return src


# -- evcxr ---------------------------------------------------------------------------------
def evcxr_binary() -> Path:
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    return cargo_home / "bin" / "evcxr_jupyter"


def evcxr_installed_version() -> str | None:
    """The version `cargo install` recorded (evcxr_jupyter has no --version)."""
    if not evcxr_binary().is_file():
        return None
    try:
        out = subprocess.run(
            ["cargo", "install", "--list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if line.startswith("evcxr_jupyter v"):
            return line.split()[1].lstrip("v").rstrip(":")
    return None


def ensure_evcxr() -> Path:
    version = pins.evcxr_version()
    if evcxr_installed_version() != version:
        log(f"building evcxr_jupyter {version} (about 10 minutes on 2 cores)")
        cmd = ["cargo", "install", "--locked", "evcxr_jupyter", "--version", version]
        if subprocess.run(cmd).returncode:
            raise SetupError(f"`{' '.join(cmd)}` failed; see its output above")
    return evcxr_binary()


# -- configuration -------------------------------------------------------------------------
def share_dir() -> Path:
    return Path(sys.prefix) / "share" / "coursekit"


def evcxr_config_dir(prelude: bool) -> Path:
    """evcxr's configuration: the course kernel's has the prelude, the plain kernel's not."""
    return share_dir() / ("evcxr" if prelude else "evcxr-plain")


def write_evcxr_config() -> None:
    init = f":cache {pins.pins()['evcxr']['cache_mib']}\n"
    prelude_crate = pins.PACKAGE / "prelude"
    for prelude in (False, True):
        d = evcxr_config_dir(prelude)
        d.mkdir(parents=True, exist_ok=True)
        if prelude:
            (d / "init.evcxr").write_text(init + f':dep coursekit_prelude = {{ path = "{prelude_crate}" }}\n')
            shutil.copyfile(pins.PACKAGE / "prelude.rs", d / "prelude.rs")
        else:
            (d / "init.evcxr").write_text(init)


def torch_lib_dir() -> Path:
    import torch  # noqa: PLC0415 (slow import, only needed here)

    return Path(torch.__file__).parent / "lib"


def kernel_env(rust_src: Path, evcxr: Path, prelude: bool) -> dict[str, str]:
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
        "RUST_SRC_PATH": str(rust_src),
        "EVCXR_CONFIG_DIR": str(evcxr_config_dir(prelude)),
        "COURSEKIT_EVCXR": str(evcxr),
        "LIBTORCH_USE_PYTORCH": "1",
        "LD_LIBRARY_PATH": os.pathsep.join(lib),
        "RUST_BACKTRACE": "0",
        # evcxr sets RUST_BACKTRACE=1 for the code it runs; this keeps error values (anyhow's,
        # Candle's) free of backtraces, whose frames change from run to run.
        "RUST_LIB_BACKTRACE": "0",
    }
    if shutil.which("ccache"):
        env["CC"] = "ccache cc"
        env["CXX"] = "ccache c++"
    return env


def write_kernelspecs(evcxr: Path, rust_src: Path) -> None:
    base = Path(kernels_dir())
    specs = {
        "rust": {
            "argv": [
                sys.executable,
                "-m",
                "coursekit.slots",
                "--",
                str(evcxr),
                "--control_file",
                "{connection_file}",
            ],
            "display_name": "Rust",
            "language": "rust",
            "interrupt_mode": "message",
            "env": kernel_env(rust_src, evcxr, prelude=False),
        },
        "rust-pytorch": {
            "argv": [sys.executable, "-m", "coursekit.kernel", "-f", "{connection_file}"],
            "display_name": "Rust + PyTorch",
            "language": "rust",
            "interrupt_mode": "signal",
            "env": kernel_env(rust_src, evcxr, prelude=True),
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
            shutil.copyfile(pins.PACKAGE / "logos" / logo, d / logo)


def write_lab_settings() -> None:
    """JupyterLab defaults for the course: no news pop-up, no update check."""
    d = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings"
    d.mkdir(parents=True, exist_ok=True)
    overrides = {
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}
    }
    (d / "overrides.json").write_text(json.dumps(overrides, indent=1) + "\n")


def setup(prewarm: bool = True) -> None:
    rust_src = ensure_system_packages()
    evcxr = ensure_evcxr()
    write_evcxr_config()
    write_kernelspecs(evcxr, rust_src)
    write_lab_settings()
    if prewarm:
        from .prewarm import prewarm_all  # noqa: PLC0415

        prewarm_all()
    log("ready")
