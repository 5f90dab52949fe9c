"""Export the digits MLP from PyTorch, build the shipped binaries, and measure them.

    .venv/bin/python ship/measure.py            # Candle and tch; prints a Markdown report
    .venv/bin/python ship/measure.py --no-tch   # Candle only
    .venv/bin/python ship/measure.py --export-only --work DIR   # DIR/digits.safetensors, DIR/test.csv

What it does, in order:
1. trains Part 4's digits MLP (nn.Sequential(Linear(64, 64), ReLU(), Linear(64, 10)), seeded)
   in PyTorch on load_digits (pixels / 16, the stratified 75/25 split with random_state=0)
   and writes `digits.safetensors` (its state_dict) and `test.csv` (the 450 test images);
2. builds `digits-candle` and `digits-tch` (`cargo build --release --locked`, the target
   directory under ~/.cache/coursekit/ship-target, the tch one with LIBTORCH_USE_PYTORCH=1
   against the venv's torch, as the course kernel does), timing each build;
3. makes a self-contained folder for the tch binary (`dist/digits-tch/`: the binary, and
   `lib/` with the libtorch libraries `ldd` says it loads), and checks it runs without
   LD_LIBRARY_PATH;
4. runs each program on the 450 test images REPEATS times — the Candle binary, the tch bundle,
   and `python -c "import torch; ..."` doing the same classification — checking that all
   print PyTorch's classes, and reports the median wall time from start to exit and the peak
   resident memory of the process (`os.wait4`'s ru_maxrss), with the binaries' sizes.

tests/test_shipping.py imports `export`, `build` and `target_dir` from here.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

SHIP = Path(__file__).resolve().parent
ROOT = SHIP.parent
REPEATS = 7

# The same classification as the binaries, in PyTorch (argv: weights file, CSV file).
PYTHON_CLASSIFY = """\
import sys, torch
from safetensors.torch import load_file
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
model.load_state_dict(load_file(sys.argv[1]))
rows = [[float(v) for v in line.split(",")] for line in open(sys.argv[2]) if line.strip()]
with torch.no_grad():
    print("\\n".join(map(str, model(torch.tensor(rows)).argmax(1).tolist())))
"""


def target_dir() -> Path:
    """Where cargo builds (kept between runs, so a second build takes seconds)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "coursekit" / "ship-target"


def export(out: Path, epochs: int = 10) -> dict:
    """Train the digits MLP in PyTorch; write out/digits.safetensors and out/test.csv.

    Returns the test labels, PyTorch's predicted classes, its accuracy and the model."""
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train).long()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(epochs):
        for idx in torch.randperm(len(x_train)).split(32):
            loss = torch.nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x_test)).argmax(1).tolist()
    out.mkdir(parents=True, exist_ok=True)
    save_file(model.state_dict(), out / "digits.safetensors")
    # repr() of a float32 value read as a double is exact, so Rust parses the same f32
    (out / "test.csv").write_text("".join(",".join(repr(float(v)) for v in row) + "\n" for row in x_test))
    labels = y_test.tolist()
    return {
        "labels": labels,
        "pred": pred,
        "accuracy": sum(p == t for p, t in zip(pred, labels, strict=True)) / len(labels),
        "model": model,
        "x_test": x_test,
    }


def tch_env() -> dict:
    """What building (and, from the target directory, running) digits-tch needs: torch-sys
    asks the venv's Python where torch is, and the loader finds libtorch on LD_LIBRARY_PATH."""
    import torch

    lib = Path(torch.__file__).parent / "lib"
    # any value turns the mode on; naming this torch makes torch-sys rebuild for another
    # environment's libtorch (as the kernels do: coursekit/setup/install.py)
    env = dict(os.environ, LIBTORCH_USE_PYTORCH=str(lib), VIRTUAL_ENV=sys.prefix)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in [str(lib), env.get("LD_LIBRARY_PATH", "")] if p)
    return env


def build(
    crate: str, env: dict | None = None, timeout: float = 1800, release: bool = True
) -> tuple[Path, float]:
    """`cargo build --release --locked -p crate`; returns the binary and the seconds it took.
    `release=False`: cargo's dev profile without debug info, the same program unoptimised (the
    tests' build: a fraction of the compile time, with overflow checks on)."""
    env = dict(env or os.environ, CARGO_TARGET_DIR=str(target_dir()))
    if not release:
        env["CARGO_PROFILE_DEV_DEBUG"] = "false"
    started = time.monotonic()
    proc = subprocess.run(
        ["cargo", "build", *(["--release"] if release else []), "--locked", "-p", crate],
        cwd=SHIP,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    seconds = time.monotonic() - started
    if proc.returncode:
        raise RuntimeError(f"cargo build -p {crate} failed:\n{proc.stderr[-4000:]}")
    return target_dir() / ("release" if release else "debug") / crate, seconds


def needed_libs(binary: Path, env: dict) -> list[Path]:
    """The shared libraries `ldd` resolves for the binary outside the system's folders."""
    out = subprocess.run(["ldd", str(binary)], env=env, capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split("=>")
        if len(parts) == 2 and parts[1].strip().startswith("/"):
            path = Path(parts[1].split("(")[0].strip())
            if not str(path).startswith(("/lib", "/usr/lib")):
                libs.append(path)
    return libs


def system_libs(binary: Path, env: dict | None = None) -> list[str]:
    out = subprocess.run(["ldd", str(binary)], env=env, capture_output=True, text=True, check=True).stdout
    return [line.split("=>")[0].split("(")[0].strip() for line in out.splitlines() if line.strip()]


def bundle_tch(binary: Path, dist: Path, env: dict) -> dict:
    """dist/digits-tch/{digits-tch, lib/*.so}: what to copy to another machine."""
    folder = dist / "digits-tch"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "lib").mkdir(parents=True)
    shutil.copy2(binary, folder / "digits-tch")
    subprocess.run(["strip", str(folder / "digits-tch")], check=True)
    libs = needed_libs(binary, env)
    for lib in libs:
        shutil.copy2(lib, folder / "lib" / lib.name)
    return {
        "folder": folder,
        "libs": {lib.name: lib.stat().st_size for lib in libs},
        "lib_bytes": sum(lib.stat().st_size for lib in libs),
        "binary_bytes": (folder / "digits-tch").stat().st_size,
    }


def run_once(cmd: list[str], env: dict | None = None) -> tuple[float, int, str]:
    """Wall seconds from start to exit, peak RSS (KiB) of the process, stdout.

    The peak RSS is GNU time's (`/usr/bin/time -f %M`): os.wait4's ru_maxrss of a child of
    this process would count the pages it shared with this (torch-importing) process before
    its exec."""
    with tempfile.TemporaryDirectory() as tmp:
        rss_file, out_file = Path(tmp) / "rss", Path(tmp) / "out"
        with open(out_file, "wb") as out:
            started = time.perf_counter()
            proc = subprocess.run(
                ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd],
                stdout=out,
                stderr=subprocess.PIPE,
                env=env,
            )
            seconds = time.perf_counter() - started
        if proc.returncode:
            raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}: {proc.stderr.decode()[-2000:]}")
        return seconds, int(rss_file.read_text().split()[-1]), out_file.read_text()


def measure_all(programs: list[tuple[str, list[str], list[int]]], env: dict) -> dict[str, dict]:
    """Run every program REPEATS times, round-robin (so that changes in the machine's load
    hit all of them alike), after one unmeasured round that fills the page cache; check
    each printed PyTorch's classes."""
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name, _, _ in programs}
    for round_ in range(REPEATS + 1):
        for name, cmd, expected in programs:
            seconds, rss, stdout = run_once(cmd, env)
            if [int(v) for v in stdout.split()] != expected:
                raise RuntimeError(f"{name}: printed other classes than PyTorch's")
            if round_:
                runs[name].append((seconds, rss))
    return {
        name: {
            "median_s": statistics.median(s for s, _ in r),
            "min_s": min(s for s, _ in r),
            "max_s": max(s for s, _ in r),
            "peak_rss_mib": max(m for _, m in r) / 1024,
        }
        for name, r in runs.items()
    }


def stripped_size(binary: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / binary.name
        shutil.copy2(binary, copy)
        subprocess.run(["strip", str(copy)], check=True)
        return copy.stat().st_size


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal")) / 2**20
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    import torch

    return (
        f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.platform()}, {rustc}, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-tch", action="store_true", help="measure the Candle binary only")
    parser.add_argument("--work", type=Path, help="folder for the exported files (default: a temporary one)")
    parser.add_argument("--export-only", action="store_true", help="only write the weights and test images")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="ship-measure-"))
    import torch

    print(f"[measure] exporting to {work}", file=sys.stderr, flush=True)
    ref = export(work)
    weights, csv = work / "digits.safetensors", work / "test.csv"
    if args.export_only:
        print(f"{weights}\n{csv} (PyTorch's test accuracy: {ref['accuracy']:.4f})")
        return 0
    expected = ref["pred"]

    candle, candle_build_s = build("digits-candle")
    print(f"[measure] digits-candle built in {candle_build_s:.1f} s", file=sys.stderr, flush=True)
    clean_env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    cmd = [str(candle), "--weights", str(weights), "--csv", str(csv)]
    programs = [("Candle 0.9.2 (`digits-candle`)", cmd, expected)]
    sizes = {"candle": (candle.stat().st_size, stripped_size(candle))}
    report = {"candle_libs": system_libs(candle, clean_env)}

    if not args.no_tch:
        env = tch_env()
        tch_bin, tch_build_s = build("digits-tch", env)
        print(f"[measure] digits-tch built in {tch_build_s:.1f} s", file=sys.stderr, flush=True)
        bundle = bundle_tch(tch_bin, SHIP / "dist", env)
        report["tch_bundle"] = bundle
        # without LD_LIBRARY_PATH, from the target directory: fails (no rpath to torch/lib)
        bare_cmd = [str(tch_bin), "--weights", str(weights), "0," * 63 + "0"]
        bare = subprocess.run(bare_cmd, env=clean_env, capture_output=True, text=True)
        report["tch_bare_error"] = bare.stderr.strip().splitlines()[:1] if bare.returncode else None
        cmd = [str(bundle["folder"] / "digits-tch"), "--weights", str(weights), "--csv", str(csv)]
        name = "tch 0.24.0 (`dist/digits-tch/`, libtorch in `lib/`)"
        programs.append((name, cmd, expected))
        sizes["tch"] = (tch_bin.stat().st_size, bundle["binary_bytes"])
        report["tch_libs"] = system_libs(bundle["folder"] / "digits-tch", clean_env)
    py_cmd = [sys.executable, "-c", PYTHON_CLASSIFY, str(weights), str(csv)]
    programs.append(('PyTorch: `python -c "import torch; ..."`', py_cmd, expected))
    programs.append(('(`python -c "import torch"` alone)', [sys.executable, "-c", "import torch"], []))
    print(f"[measure] running {len(programs)} programs {REPEATS + 1} times each", file=sys.stderr, flush=True)
    rows = list(measure_all(programs, clean_env).items())
    torch_dir = Path(torch.__file__).parent
    nvidia = torch_dir.parent / "nvidia"

    print(f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on: {machine()}.\n")
    acc = ref["accuracy"]
    print(f"PyTorch test accuracy: {acc:.4f} ({len(expected)} images), the classes every program printed.\n")
    print("| program | start → answer, median (min–max) | peak RSS |")
    print("|---|---|---|")
    for name, r in rows:
        spread = f"{r['min_s'] * 1000:.0f}–{r['max_s'] * 1000:.0f}"
        print(f"| {name} | {r['median_s'] * 1000:.0f} ms ({spread}) | {r['peak_rss_mib']:.1f} MiB |")
    print("\n| binary | size | stripped |")
    print("|---|---|---|")
    for fw, (full, stripped) in sizes.items():
        print(f"| digits-{fw} | {mib(full)} | {mib(stripped)} |")
    print(f"\nbuild times (this run; cached if built before): digits-candle {candle_build_s:.1f} s", end="")
    print(f", digits-tch {tch_build_s:.1f} s" if not args.no_tch else "")
    print(f"digits-candle loads: {', '.join(report['candle_libs'])}")
    if not args.no_tch:
        b = report["tch_bundle"]
        print(f"digits-tch bundle: binary {mib(b['binary_bytes'])} + lib/ {mib(b['lib_bytes'])}:")
        for name, size in sorted(b["libs"].items(), key=lambda kv: -kv[1]):
            print(f"  {name}: {mib(size)}")
        print(f"digits-tch (bundle) loads: {', '.join(report['tch_libs'])}")
        print(f"digits-tch from target/ without LD_LIBRARY_PATH: {report['tch_bare_error']}")
    cuda = mib(du(nvidia)) if nvidia.is_dir() else "none"
    print(f"torch's folder: {mib(du(torch_dir))}; nvidia/ (CUDA wheels): {cuda}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
