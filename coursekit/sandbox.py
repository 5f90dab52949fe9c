"""Running an untrusted submission's kernel in a sandbox (used by `coursekit grade`).

nbgrader runs outside, trusted; only the kernel it starts runs inside bubblewrap:

- no network (a fresh network namespace; the kernel talks to nbgrader over Unix sockets
  in the job directory), its own PID/IPC/UTS namespaces, all capabilities dropped;
- a file system made of read-only system directories, the Python environment, the kit's
  package, the Rust toolchain and crate sources; a cell can write only to size-capped
  tmpfs (home, working directory, /tmp) and the build directory. The repository
  (solutions/, other submissions) and the grade store are simply not there;
- the evcxr build directory is a hard-linked copy of a warm template: the large compiled
  artefacts are bind-mounted read-only one by one (so a submission cannot alter what later
  jobs link), the small files are private copies;
- limits: a memory and process-count cgroup when the cgroup file system is writable
  (root), otherwise RLIMIT_NPROC (which does not bind root); RLIMIT_FSIZE, RLIMIT_CORE,
  RLIMIT_NOFILE and RLIMIT_CPU always; a size-capped /tmp; wall-clock limits per cell and
  per notebook are enforced by the grader, which also watches the job directory's size.

What stays unprotected is listed in the README's workshop guide.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

from . import slots

BIG_FILE = 64 * 1024  # artefacts above this size are shared read-only, smaller files copied


@dataclass
class Limits:
    memory_bytes: int = 4 * 2**30
    processes: int = 512
    file_bytes: int = 256 * 2**20
    cpu_seconds: int = 1200
    open_files: int = 4096
    tmp_bytes: int = 512 * 2**20  # each of /tmp, home and the working directory


@dataclass
class Job:
    """A sandbox's files: `runtime` (mounted read-write at its own path: the connection file
    and the kernel's sockets; a short path, as a Unix socket's path is limited to 107
    bytes) and `root/slot` (the evcxr build directory, mounted where its template lives).
    Home, working directory and /tmp are size-capped tmpfs."""

    root: Path
    runtime: Path
    template: Path | None = None  # a warm evcxr build directory to clone
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def from_env(cls) -> Job:
        template = os.environ.get("COURSEKIT_TEMPLATE")
        return cls(
            Path(os.environ["COURSEKIT_JOB"]),
            Path(os.environ["COURSEKIT_RUNTIME"]),
            Path(template) if template else None,
        )

    @property
    def slot(self) -> Path:
        return self.root / "slot"

    @property
    def readonly_files(self) -> Path:
        return self.root / "readonly-files.txt"

    @property
    def slot_path(self) -> Path:
        """Where the build directory appears inside the sandbox."""
        return self.template or slots.pool_dir() / "slot-sandbox"


def clone_template(job: Job) -> None:
    """Hard-link the warm build directory into the job; list the shared (big) files, which
    the sandbox mounts read-only, and copy the small ones."""
    shared = []
    job.slot.mkdir(parents=True)
    if job.template is not None and job.template.is_dir():
        for src in job.template.rglob("*"):
            rel = src.relative_to(job.template)
            dst = job.slot / rel
            if src.is_symlink():
                dst.symlink_to(os.readlink(src))
            elif src.is_dir():
                dst.mkdir(parents=True, exist_ok=True)
            elif src.name == ".lock":
                continue
            elif src.stat().st_size > BIG_FILE and "ctx" not in src.name:
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.link(src, dst)
                shared.append(str(rel))
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
    job.readonly_files.write_text("\n".join(shared))


def _ro(path: str | Path) -> list[str]:
    """Read-only at its own path and, if a symlink leads elsewhere, at its real path too
    (the kernelspecs name the real paths)."""
    if not os.path.exists(path):
        return []
    paths = dict.fromkeys([str(path), os.path.realpath(path)])
    return [arg for p in paths for arg in ("--ro-bind", p, p)]


HOME = "/sandbox/home"
WORK = "/sandbox/work"


def bwrap_argv(job: Job, argv: list[str], env: dict[str, str]) -> list[str]:
    """The bubblewrap command that runs `argv` in the job's sandbox."""
    real_cargo = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    rustup = Path(os.environ.get("RUSTUP_HOME", Path.home() / ".rustup"))
    package = Path(__file__).resolve().parent
    slot_path = job.slot_path
    pool = slot_path.parent
    runtime = job.runtime
    runtime.mkdir(parents=True, exist_ok=True)
    cmd = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        "1000",
        "--gid",
        "1000",
    ]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    for d in ("/tmp", HOME, WORK):  # the only places a cell can write files: capped tmpfs
        cmd += ["--size", str(job.limits.tmp_bytes), "--tmpfs", d]
    for d in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"):
        cmd += _ro(d)
    cmd += _ro(sys.prefix) + _ro(sys.base_prefix) + _ro(package) + _ro(rustup) + _ro(real_cargo / "bin")
    cmd += _ro(env.get("RUST_SRC_PATH", "/nonexistent")) + _ro(pool / ".cargo")
    cmd += ["--ro-bind", str(real_cargo / "registry"), f"{HOME}/.cargo/registry"]
    cmd += ["--bind", str(runtime), str(runtime)]
    cmd += ["--bind", str(job.slot), str(slot_path)]
    for rel in filter(None, job.readonly_files.read_text().splitlines()):
        cmd += ["--ro-bind", str(job.slot / rel), str(slot_path / rel)]
    env = {
        **{k: v for k, v in env.items() if k != "JPY_PARENT_PID"},  # not visible from the sandbox
        "HOME": HOME,
        "CARGO_HOME": f"{HOME}/.cargo",
        "RUSTUP_HOME": str(rustup),
        "XDG_CACHE_HOME": f"{HOME}/.cache",
        "CARGO_NET_OFFLINE": "true",
        "COURSEKIT_POOL": str(pool),
        "COURSEKIT_SLOT": slot_path.name.removeprefix("slot-"),
    }
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return [*cmd, "--chdir", WORK, "--", *argv]


def _cgroup_dirs(name: str) -> list[Path]:
    """Writable cgroup directories for memory and pids (v1 or v2), created for `name`."""
    dirs = []
    unified = Path("/sys/fs/cgroup/cgroup.controllers")
    candidates = (
        [Path("/sys/fs/cgroup")]
        if unified.is_file()
        else [Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/pids")]
    )
    for base in candidates:
        d = base / "coursekit" / name
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        dirs.append(d)
    return dirs


def apply_limits(job: Job) -> list[Path]:
    """In the sandbox's launcher (before exec): join cgroups and set rlimits."""
    limits = job.limits
    groups = _cgroup_dirs(job.root.name)
    for d in groups:
        settings = {
            "memory.limit_in_bytes": limits.memory_bytes,
            "memory.max": limits.memory_bytes,
            "memory.memsw.limit_in_bytes": limits.memory_bytes,
            "memory.swap.max": 0,
            "pids.max": limits.processes,
        }
        for key, value in settings.items():
            if (d / key).exists():
                with contextlib.suppress(OSError):
                    (d / key).write_text(str(value))
        (d / "cgroup.procs").write_text(str(os.getpid()))
    for res, value in (
        (resource.RLIMIT_FSIZE, limits.file_bytes),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_NPROC, limits.processes),
    ):
        resource.setrlimit(res, (value, value))
    return groups


def remove_cgroups(name: str) -> None:
    """Kill what is left in a job's cgroups and remove them (from the grader, after the job)."""
    for base in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/pids")):
        d = base / "coursekit" / name
        if not d.is_dir():
            continue
        with contextlib.suppress(OSError):
            for pid in (d / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), 9)
        with contextlib.suppress(OSError):
            d.rmdir()


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the notebook's kernel inside the job's sandbox (COURSEKIT_JOB), over IPC."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        runtime = Job.from_env().runtime
        runtime.mkdir(parents=True, exist_ok=True)
        self.transport = "ipc"
        self.ip = str(runtime / "kernel")
        self.connection_file = str(runtime / f"kernel-{os.getpid()}-{id(self)}.json")

    def format_kernel_cmd(self, extra_arguments=None):
        # A signal cannot reach into the sandbox's PID namespace: interrupt with a message.
        self.kernel_spec.interrupt_mode = "message"
        cmd = super().format_kernel_cmd(extra_arguments)
        return [sys.executable, "-m", "coursekit.sandbox", os.environ["COURSEKIT_JOB"], "--", *cmd]


def main(argv: list[str]) -> None:
    """`python -m coursekit.sandbox JOB_DIR -- KERNEL ARGV`: exec the kernel in the sandbox."""
    job_dir, sep, *cmd = argv
    assert sep == "--", "usage: python -m coursekit.sandbox JOB_DIR -- COMMAND..."
    job = Job.from_env()
    assert Path(job_dir) == job.root, "the job directory and COURSEKIT_JOB differ"
    full = bwrap_argv(job, cmd, dict(os.environ))
    apply_limits(job)
    os.execvpe("bwrap", full, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})


if __name__ == "__main__":
    main(sys.argv[1:])
