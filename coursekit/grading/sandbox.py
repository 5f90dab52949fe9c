"""Running an untrusted submission's kernel in a sandbox (used by `coursekit grade`).

nbgrader runs outside, trusted; only the kernel it starts runs inside bubblewrap:

- no network (a fresh network namespace; the kernel talks to nbgrader over Unix sockets
  in the job's runtime directory), its own PID/IPC/UTS namespaces, no capabilities, and an
  unprivileged user: the grader's own user, or a user of the job's own when the grader
  runs as root;
- a file system made of read-only system directories, the Python environment, the kit's
  package, the Rust toolchain and crate sources; a cell can write only to size-capped
  tmpfs (home, working directory, /tmp), the job's runtime directory and its build
  directory. The repository (solutions/, other submissions), the grade store and the
  grader's environment variables (only an allow-list passes) are simply not there;
- the evcxr build directory is a private copy of a warm template's small files, with the
  large compiled artefacts bind-mounted read-only from the template (so a submission
  cannot alter what later jobs link);
- limits: memory and process-count cgroups (v1, or v2 with its controllers enabled) when
  the cgroup file system is writable, and a loud warning when it is not; RLIMIT_FSIZE,
  RLIMIT_CORE, RLIMIT_NOFILE, RLIMIT_CPU and RLIMIT_NPROC always; the grader enforces the
  wall-clock limits and the job's disk use (everything it can write lies under the job's
  root, counted file by file, hard links once).

What stays unprotected is listed in the README's workshop guide.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

from ..setup import slots

BIG_FILE = 64 * 1024  # artefacts above this size are shared read-only, smaller files copied
# When the grader runs as root, each sandbox runs as a user of its own (this base plus its
# launcher's pid): no other account's files are its, and the per-user limits (processes)
# are per job — with one shared user, one job's fork bomb starved the others.
JOB_UID_BASE = 1_000_000
HOME = "/sandbox/home"
WORK = "/sandbox/work"
# The only variables of the grader's environment a kernel sees (its kernelspec's among them).
ENV_ALLOWED = {
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "RUST_SRC_PATH",
    "EVCXR_CONFIG_DIR",
    "COURSEKIT_EVCXR",
    "LIBTORCH_USE_PYTORCH",
    "LD_LIBRARY_PATH",
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
    "CC",
    "CXX",
    "JUPYTER_RUNTIME_DIR",
    "COURSEKIT_GRADED",
    "COURSEKIT_PYTHON_CELLS",
}


@dataclass
class Limits:
    memory_bytes: int = 4 * 2**30
    processes: int = 512
    file_bytes: int = 256 * 2**20
    cpu_seconds: int = 1200
    open_files: int = 4096
    tmp_bytes: int = 512 * 2**20  # each of /tmp, home and the working directory
    disk_bytes: int = 2 * 2**30  # all the job writes to disk (build and runtime directories)


@dataclass
class Job:
    """A sandbox's files, all under `root`: `run` (the runtime directory: connection files
    and the kernel's sockets, reached through the short path `runtime`, as a Unix
    socket's path is limited to 107 bytes) and `slot` (the evcxr build directory, mounted
    where its template lives). Home, working directory and /tmp are size-capped tmpfs."""

    root: Path
    template: Path | None = None  # a warm evcxr build directory to clone
    limits: Limits = field(default_factory=Limits)
    runtime: Path = Path()  # set by create()

    @classmethod
    def create(cls, root: Path, template: Path | None, limits: Limits) -> Job:
        root.mkdir(parents=True)
        (root / "run").mkdir()
        link = Path(tempfile.mkdtemp(prefix="ck-"))  # a short path for the sockets
        link.rmdir()
        link.symlink_to(root / "run")
        job = cls(root, template, limits, link)
        (root / "job.json").write_text(
            json.dumps(
                {
                    "template": str(template) if template else None,
                    "runtime": str(link),
                    "limits": asdict(limits),
                }
            )
        )
        return job

    @classmethod
    def load(cls, root: Path) -> Job:
        spec = json.loads((root / "job.json").read_text())
        template = Path(spec["template"]) if spec["template"] else None
        return cls(root, template, Limits(**spec["limits"]), Path(spec["runtime"]))

    def remove(self) -> None:
        remove_cgroups(self.root.name)
        with contextlib.suppress(OSError):
            self.runtime.unlink()
        shutil.rmtree(self.root, ignore_errors=True)

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
    """Copy the warm build directory's small files into the job; list the big ones, which
    the sandbox mounts read-only from the template (an empty file marks each place)."""
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
            elif slots.left_behind(src):
                continue
            elif src.stat().st_size > BIG_FILE and "ctx" not in src.name:
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.touch()
                shared.append(str(rel))
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
    job.readonly_files.write_text("\n".join(shared))


def give_to(job: Job, uid: int) -> None:
    """Make the job's writable directories the sandbox user's (the grader runs as root)."""
    for d in (job.slot, job.root / "run"):
        for path in [d, *d.rglob("*")]:
            os.lchown(path, uid, uid)


def _ro(path: str | Path) -> list[str]:
    """Read-only at its own path and, if a symlink leads elsewhere, at its real path too
    (the kernelspecs name the real paths)."""
    if not os.path.exists(path):
        return []
    paths = dict.fromkeys([str(path), os.path.realpath(path)])
    return [arg for p in paths for arg in ("--ro-bind", p, p)]


def sandbox_env(env: dict[str, str], job: Job) -> dict[str, str]:
    """The kernel's environment: the allow-listed variables, and the sandbox's own paths."""
    rustup = Path(env.get("RUSTUP_HOME", Path.home() / ".rustup"))
    return {
        **{k: v for k, v in env.items() if k in ENV_ALLOWED},
        "HOME": HOME,
        "CARGO_HOME": f"{HOME}/.cargo",
        "RUSTUP_HOME": str(rustup),
        "XDG_CACHE_HOME": f"{HOME}/.cache",
        "CARGO_NET_OFFLINE": "true",
        "JUPYTER_RUNTIME_DIR": str(job.runtime),
        "COURSEKIT_POOL": str(job.slot_path.parent),
        "COURSEKIT_SLOT": job.slot_path.name.removeprefix("slot-"),
    }


def bwrap_argv(job: Job, argv: list[str], env: dict[str, str], uid: int | None = None) -> list[str]:
    """The bubblewrap command that runs `argv` in the job's sandbox (as `uid` when the
    grader runs as root)."""
    real_cargo = Path(env.get("CARGO_HOME", Path.home() / ".cargo"))
    inner = sandbox_env(env, job)
    package = Path(__file__).resolve().parent.parent
    slot_path = job.slot_path
    as_root = os.geteuid() == 0
    cmd = ["bwrap", "--die-with-parent", "--new-session"]
    if as_root:
        # No user namespace: root sets the sandbox up, then setpriv (below) becomes the job's
        # own unprivileged user, with no capabilities, before anything of the submission runs.
        cmd += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        cmd += ["--unshare-all", "--cap-drop", "ALL", "--uid", "1000", "--gid", "1000"]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    for d in ("/tmp", HOME, WORK):  # capped tmpfs, writable by the sandbox's user
        cmd += ["--size", str(job.limits.tmp_bytes), "--perms", "0777" if as_root else "0755", "--tmpfs", d]
    for d in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"):
        cmd += _ro(d)
    cmd += _ro(sys.prefix) + _ro(sys.base_prefix) + _ro(package) + _ro(inner["RUSTUP_HOME"])
    cmd += _ro(real_cargo / "bin")
    cmd += _ro(env.get("RUST_SRC_PATH", "/nonexistent")) + _ro(slot_path.parent / ".cargo")
    cmd += ["--ro-bind", str(real_cargo / "registry"), f"{HOME}/.cargo/registry"]
    # the runtime directory at its short path (sockets) and its real one (connection files)
    cmd += [
        "--bind",
        str(job.root / "run"),
        str(job.runtime),
        "--bind",
        str(job.root / "run"),
        str(job.root / "run"),
    ]
    cmd += ["--bind", str(job.slot), str(slot_path)]
    for rel in filter(None, job.readonly_files.read_text().splitlines()):
        if job.template is not None:
            cmd += ["--ro-bind", str(job.template / rel), str(slot_path / rel)]
    cmd = _traversable_parents(cmd)
    cmd += ["--clearenv"]
    for key, value in inner.items():
        cmd += ["--setenv", key, value]
    cmd += ["--chdir", WORK, "--"]
    if as_root:
        uid = uid or JOB_UID_BASE
        drop = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
        cmd += ["setpriv", *drop, "--bounding-set=-all", "--no-new-privs", "--"]
    return [*cmd, *argv]


def _traversable_parents(cmd: list[str]) -> list[str]:
    """bwrap makes the missing parents of a mount point with mode 0700, which would hide
    the toolchain (under /root, say) from a sandbox user who is not their owner. Make those
    parents first, world-traversable (they hold nothing but the mount points); parents
    inside a bind-mounted tree exist already."""
    binds = [cmd[i + 2] for i, arg in enumerate(cmd) if arg in ("--bind", "--ro-bind")]
    binds += [cmd[i + 1] for i, arg in enumerate(cmd) if arg in ("--proc", "--dev")]

    targets = {Path(t) for t in binds}  # a job binds hundreds of files: keep this linear

    def covered(path: Path) -> bool:
        return path in targets or any(a in targets for a in path.parents)

    candidates = {p for t in targets for p in t.parents if p != Path("/")}
    parents = {p for p in candidates if not covered(p)}
    first = cmd.index("--ro-bind")
    made = [
        arg
        for p in sorted(parents, key=lambda p: (len(p.parts), str(p)))
        for arg in ("--perms", "0755", "--dir", str(p))
    ]
    return cmd[:first] + made + cmd[first:]


# -- cgroups -----------------------------------------------------------------------------------
CGROUP = Path("/sys/fs/cgroup")


def _v2() -> bool:
    return (CGROUP / "cgroup.controllers").is_file()


def _enable_v2_controllers(d: Path) -> None:
    """memory and pids for the children of `d` and of every parent up to the root."""
    for parent in reversed([d, *d.parents]):
        if parent == CGROUP.parent or not str(parent).startswith(str(CGROUP)):
            continue
        control = parent / "cgroup.subtree_control"
        with contextlib.suppress(OSError):
            if not {"memory", "pids"} <= set(control.read_text().split()):
                control.write_text("+memory +pids")


def _cgroup_dirs(name: str) -> list[Path]:
    """Writable cgroup directories for memory and pids (v1 or v2), created for `name`."""
    dirs = []
    if _v2():
        base = CGROUP / "coursekit"
        with contextlib.suppress(OSError):
            base.mkdir(exist_ok=True)
            _enable_v2_controllers(base)
            (base / name).mkdir(exist_ok=True)
            if (base / name / "memory.max").exists() and (base / name / "pids.max").exists():
                dirs.append(base / name)
        return dirs
    for controller in ("memory", "pids"):
        d = CGROUP / controller / "coursekit" / name
        with contextlib.suppress(OSError):
            d.mkdir(parents=True, exist_ok=True)
            dirs.append(d)
    return dirs


def cgroup_problem() -> str | None:
    """Why memory and process limits per job cannot be applied here, or None."""
    probe = f"probe-{os.getpid()}"
    dirs = _cgroup_dirs(probe)
    remove_cgroups(probe)
    needed = 1 if _v2() else 2
    if len(dirs) >= needed:
        return None
    return (
        "no memory or process-count limit per job: the cgroup file system is not writable "
        f"({'v2' if _v2() else 'v1'} at {CGROUP}). Run the grader as root, or in a delegated cgroup "
        "(e.g. `systemd-run --user --scope -p Delegate=yes coursekit grade ...`)"
    )


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
        # with a pids cgroup, that is the limit (and counts its events); this is the backstop
        (resource.RLIMIT_NPROC, limits.processes + (64 if groups else 0)),
    ):
        resource.setrlimit(res, (value, value))
    return groups


def limit_events(job: Job) -> list[str]:
    """The job's limits that fired, read from its cgroups' event counters (before removal)."""
    counters = {
        "memory": ("memory.events", "oom_kill", "memory.oom_control", "oom_kill"),
        "processes": ("pids.events", "max", "pids.events", "max"),
    }
    hits = {}
    for base in (CGROUP / "coursekit", CGROUP / "memory" / "coursekit", CGROUP / "pids" / "coursekit"):
        d = base / job.root.name
        for what, (v2_file, v2_key, v1_file, v1_key) in counters.items():
            for file, key in ((v2_file, v2_key), (v1_file, v1_key)):
                with contextlib.suppress(OSError, ValueError):
                    values = dict(line.split() for line in (d / file).read_text().splitlines())
                    hits[what] = max(hits.get(what, 0), int(values.get(key, 0)))
    events = []
    if hits.get("memory"):
        events.append(
            f"the job reached its memory limit ({job.limits.memory_bytes >> 20} MiB): a process was stopped"
        )
    if hits.get("processes"):
        events.append(f"the job reached its limit of {job.limits.processes} processes: new ones were refused")
    return events


def remove_cgroups(name: str) -> None:
    """Kill what is left in a job's cgroups and remove them (from the grader, after the job)."""
    for base in (CGROUP / "coursekit", CGROUP / "memory" / "coursekit", CGROUP / "pids" / "coursekit"):
        d = base / name
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
        runtime = Job.load(Path(os.environ["COURSEKIT_JOB"])).runtime
        self.transport = "ipc"
        self.ip = str(runtime / "kernel")
        self.connection_file = str(runtime / f"kernel-{os.getpid()}-{id(self)}.json")

    def format_kernel_cmd(self, extra_arguments=None):
        # A signal cannot reach into the sandbox's PID namespace: interrupt with a message.
        self.kernel_spec.interrupt_mode = "message"
        cmd = super().format_kernel_cmd(extra_arguments)
        return [sys.executable, "-m", "coursekit.grading.sandbox", "--", *cmd]


def main(argv: list[str]) -> None:
    """`python -m coursekit.grading.sandbox -- KERNEL ARGV` (COURSEKIT_JOB names the job):
    exec the kernel in the sandbox."""
    sep, *cmd = argv
    assert sep == "--", "usage: python -m coursekit.grading.sandbox -- COMMAND..."
    job = Job.load(Path(os.environ["COURSEKIT_JOB"]))
    uid = None
    if os.geteuid() == 0:
        uid = JOB_UID_BASE + os.getpid()
        give_to(job, uid)
        for path in cmd[cmd.index("-f") + 1 :][:1] if "-f" in cmd else []:  # nbgrader's connection file
            os.chown(path, uid, uid)
    full = bwrap_argv(job, cmd, dict(os.environ), uid)
    apply_limits(job)
    os.execvpe("bwrap", full, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})


if __name__ == "__main__":
    main(sys.argv[1:])
