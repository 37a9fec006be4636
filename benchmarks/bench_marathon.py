"""Speed and memory of a marathon on the embedded twin (issue: ≤ 30 s wall and ≤ 1 GB RSS for
the default 3-app, 12-virtual-hour marathon with RollbackAgent on a 2-core machine).

    python benchmarks/bench_marathon.py                 # the default marathon
    python benchmarks/bench_marathon.py --repeat 3      # the default marathon 3 times, and the best of them
    python benchmarks/bench_marathon.py --scaling       # also: wall time vs services and vs run length
    python benchmarks/bench_marathon.py --against REF --repeat 3   # this tree vs git REF, alternately

A shared or throttled machine makes one run's time vary by 10 % or more (the same head measured
78.8 and 87.9 s of CPU here, back to back), and machines of the same size differ by 2x: compare
heads by the best of several runs, taken alternately (`--against` does that: it exports REF's
package with `git archive`, runs REF's own default marathon and this tree's in turn, and reports
the ratio of the best walls), and the behaviour by the score (the runs are deterministic).

Two lines before the table say what the figures were measured on. The interpreter: CPython
builds differ by more than most changes do (the same head, 47.0 s with pyenv's default build,
which links libpython as a shared library and has no profile-guided optimisation, and 41.1 s
with Debian's python3.11, back to back). The machine: before each run, a fixed pure-Python
workload (:func:`calibrate`) is timed, its best of five in ms (`calib_ms`); a run's wall divided
by it (`wall_per_calib`) is what the marathon costs in units of this machine's speed: a rough
way to carry a figure from one machine to another (on one machine it read 842–1345 for one
build as the machine's speed drifted; docs/INTERNALS.md).

Each measurement runs `sremarathon run --json` in a fresh process and reads that process's own
peak RSS from the kernel (wait4), so nothing of an earlier run is counted. The package is
byte-compiled first, as an installed one is (pip compiles it; a checkout's first import writes
`__pycache__`): where PYTHONDONTWRITEBYTECODE is set, every run would otherwise compile ~45k lines
of source again (measured: imports 1.1 s instead of 0.5 s), which is no cost of the marathon.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import yaml

import pytest_sremarathon
from pytest_sremarathon.builtin import APPS_DIR, SCENARIOS_DIR

AGENT = "pytest_sremarathon.baselines:RollbackAgent"
PACKAGE = "pytest_sremarathon"


def interpreter() -> str:
    """The CPython that runs the marathons (``sys.executable``): version, path, and whether its
    core is a shared libpython (pyenv's default build), read from this process's mapped files."""
    maps = Path("/proc/self/maps")
    shared = "libpython" in maps.read_text() if maps.exists() else None
    linked = {True: "libpython shared", False: "libpython linked in", None: "libpython: unknown"}[shared]
    return f"{platform.python_implementation()} {platform.python_version()} ({sys.executable}; {linked})"


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def _workload() -> int:
    """What the twin's inner loops are made of: dict reads and writes keyed by formatted
    strings, tuples, small function calls, a sort."""
    counts: dict[str, int] = {}
    for i in range(200_000):
        key = f"pod-{i % 997}"
        counts[key] = counts.get(key, 0) + (i & 7)
    return len(sorted(counts.items(), key=lambda kv: (kv[1], kv[0])))


def calibrate(rounds: int = 5) -> float:
    """The machine's speed now: the best of ``rounds`` timings of :func:`_workload`, in ms."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        _workload()
        times.append(time.perf_counter() - t0)
    return round(min(times) * 1000, 1)


def measure(scenario: Path, out: Path, package_root: Optional[Path] = None) -> dict:
    """One run of ``scenario`` in a fresh process; ``package_root``: import the package from
    there instead (another revision's, see :func:`export`)."""
    env = dict(os.environ)
    calib_ms = calibrate()
    if package_root is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(package_root), env.get("PYTHONPATH"))))
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "pytest_sremarathon.cli", "run", "--json", "--agent", AGENT,
                                 "--scenario", str(scenario), "--out", str(out)], stdout=stdout, stderr=stderr,
                                env=env, cwd=package_root)
        # wait4: this run's own peak RSS (RUSAGE_CHILDREN would report the largest run so far)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        stdout.seek(0)
        stderr.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(stderr.read().decode())
        result = json.loads(stdout.read())
    return {"wall_process_s": round(wall, 2), "wall_marathon_s": result["wall_seconds"],
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),  # (its children's too: git, the agent)
            "virtual_h": result["virtual_seconds"] / 3600, "speedup": round(result["virtual_seconds"] / wall),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "faults": len(result["faults"]),
            "score": result["score"], "bundle_mb": round(Path(result["bundle"]).stat().st_size / 2**20, 2),
            "calib_ms": calib_ms, "wall_per_calib": round(result["wall_seconds"] * 1000 / calib_ms)}


def best(runs: list[dict]) -> dict:
    """The fastest of repeated runs of one scenario: the least time, the largest memory."""
    out = dict(runs[0])
    for key in ("wall_process_s", "wall_marathon_s", "cpu_s", "calib_ms", "wall_per_calib"):
        out[key] = min(r[key] for r in runs)
    out["speedup"] = max(r["speedup"] for r in runs)
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return out


def export(ref: str, into: Path) -> Path:
    """The package as of git revision ``ref`` (of this checkout), byte-compiled, under ``into``."""
    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", ref, PACKAGE],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"--against {ref}: git archive failed in {repo}: {archive.stderr.decode().strip()} "
                         f"(give a commit, tag or branch of this checkout)")
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    compileall.compile_dir(into / PACKAGE, quiet=1)
    return into


def variant(base: dict, tmp: Path, name: str, **changes: object) -> Path:
    data = dict(base, **changes)
    data["apps_dir"] = str(APPS_DIR)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scaling", action="store_true", help="also measure scaling with services and run length")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run the default marathon N times and add the best of them (default: 1)")
    parser.add_argument("--against", metavar="REF",
                        help="also run git revision REF's default marathon, alternating with this tree's "
                             "(N times each), and report the ratio of the best walls")
    args = parser.parse_args()
    base = yaml.safe_load((SCENARIOS_DIR / "default.yaml").read_text())
    compileall.compile_dir(Path(pytest_sremarathon.__file__).parent, quiet=1)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ref_root = export(args.against, tmp / "ref") if args.against else None
        runs, ref_runs = [], []
        for _ in range(max(1, args.repeat)):
            if ref_root is not None:
                ref_runs.append(measure(ref_root / PACKAGE / "scenarios" / "default.yaml", tmp / "runs", ref_root))
            runs.append(measure(SCENARIOS_DIR / "default.yaml", tmp / "runs"))
        rows = [("default" if len(runs) == 1 else f"default #{i}", run) for i, run in enumerate(runs, 1)]
        if len(runs) > 1:
            rows.append((f"best of {len(runs)}", best(runs)))
        if ref_runs:
            rows += [(f"{args.against[:10]} #{i}", run) for i, run in enumerate(ref_runs, 1)]
            rows.append((f"{args.against[:10]} best", best(ref_runs)))
        if args.scaling:
            apps = base["apps"]
            for n in range(1, len(apps) + 1):
                faults = max(1, round(base["schedule"]["faults"] * n / len(apps)))
                scenario = variant(base, tmp, f"apps{n}", apps=apps[:n],
                                   schedule=dict(base["schedule"], faults=faults))
                rows.append((f"{n} app(s), 12 h", measure(scenario, tmp / "runs")))
            for hours in (3, 6, 12):
                faults = max(1, round(base["schedule"]["faults"] * hours / 12))
                scenario = variant(base, tmp, f"h{hours}", duration=f"{hours}h", segment=f"{min(hours, 2)}h",
                                   schedule=dict(base["schedule"], faults=faults))
                rows.append((f"{len(base['apps'])} apps, {hours} h", measure(scenario, tmp / "runs")))
    keys = list(rows[0][1])
    print(f"interpreter: {interpreter()}")
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.platform()}")
    print(f"{'run':<18}" + "".join(f"{k:>17}" for k in keys))
    for name, row in rows:
        print(f"{name:<18}" + "".join(f"{row[k]!s:>17}" for k in keys))
    if args.against:
        ratio = best(runs)["wall_marathon_s"] / best(ref_runs)["wall_marathon_s"]
        print(f"this tree / {args.against}: {ratio:.3f} of the marathon wall (best of {len(runs)} each, alternating)")


if __name__ == "__main__":
    main()
