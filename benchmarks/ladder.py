"""The baseline ladder: every shipped agent, honest and adversarial, on the default marathon.

    python benchmarks/ladder.py                       # seeds 1 2 3, one run at a time
    python benchmarks/ladder.py 1 -j 2                # seed 1 only, two runs in parallel
    python benchmarks/ladder.py 1 2 --agents NoopAgent,SprayComponents --out ladder.json

Each run is ``sremarathon run --json --agent pytest_sremarathon.baselines:<Name> --seed N`` in a
fresh process (what a CI job runs), so nothing leaks between agents. The table has, per agent and
seed: the Marathon-Score, the number of faults correlated (C), localized (L) and repaired (R)
out of N, and — when the scorer's JSON carries them — the sum of the per-fault localization
credit (``localization_credit``), the largest number of candidates named for one fault
(``candidates``) and the collateral counts (top-level ``collateral``), plus the declared-done
gap. Keys are read defensively: a JSON without them shows ``–``. ``--out FILE.json`` saves
every run's raw JSON.

A default-marathon run takes 25–80 s of wall time; 11 agents × 3 seeds is 20–40 minutes on
two cores. The bundles are kept (default ``sremarathon-runs/ladder/``, ignored by git; a few MB
each), so the whole ladder can be rescored later with ``sremarathon score BUNDLE`` — e.g. under
another scoring version — without running it again; each run's bundle path is in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "pytest_sremarathon" / "scenarios" / "default.yaml"
MODULE = "pytest_sremarathon.baselines"
HONEST = ["NoopAgent", "ClaimEverything", "RestartAgent", "RollbackAgent", "HeuristicSRE"]
ADVERSARIAL = ["SprayComponents", "SprayChanges", "RotateCandidates", "TouchWithoutFixing", "SprayAlerts",
               "RestartEverything"]
AGENTS = HONEST + ADVERSARIAL
DASH = "–"


def run_one(agent: str, seed: int, args: argparse.Namespace, runs_dir: Path) -> dict[str, Any]:
    """One marathon in its own process; the CLI's JSON, or ``{"error": ...}``."""
    spec = agent if ":" in agent else f"{MODULE}:{agent}"
    cmd = [sys.executable, "-m", "pytest_sremarathon.cli", "run", "--json", "--quiet", "--agent", spec,
           "--seed", str(seed), "--scenario", str(args.scenario), "--out", str(runs_dir / f"{agent}-seed{seed}")]
    if args.duration:
        cmd += ["--duration", args.duration]
    if args.step_budget:
        cmd += ["--step-budget", str(args.step_budget)]
    if args.think_time:
        cmd += ["--think-time", args.think_time]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:g} s"}
    wall = round(time.perf_counter() - t0, 1)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return {"error": f"exit {proc.returncode}: {tail[:400]}", "process_wall_seconds": wall}
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"no JSON on stdout: {proc.stdout[-300:]!r}", "process_wall_seconds": wall}
    if not isinstance(result, dict):
        return {"error": "the JSON is not an object", "process_wall_seconds": wall}
    result["process_wall_seconds"] = wall
    return result


# -- reading the scorer's JSON defensively ---------------------------------------------------


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _stage(faults: list[dict[str, Any]], key: str) -> Optional[float]:
    """How many faults passed a stage: booleans count 1, fractional credit counts as given."""
    values = [_number(f.get(key)) for f in faults if key in f]
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _candidates(value: Any) -> Optional[float]:
    if isinstance(value, (list, tuple, set, dict)):
        return float(len(value))
    return _number(value)


def _collateral(result: dict[str, Any]) -> Optional[str]:
    """Top-level ``collateral``: a count, a list of items, or a mapping of kind -> count/items."""
    value = result.get("collateral")
    if value is None:
        value = result.get("collateral_actions")
    if value is None:
        return None
    if isinstance(value, dict):  # only the kinds that happened; "0" when none did
        parts = []
        for k, v in sorted(value.items()):
            n = len(v) if isinstance(v, (list, tuple)) else _number(v)
            if n:
                parts.append(f"{k}={_fmt(n)}")
        return " ".join(parts) if parts else "0"
    if isinstance(value, (list, tuple)):
        return str(len(value))
    n = _number(value)
    return _fmt(n) if n is not None else str(value)[:40]


def _fmt(value: Optional[float], digits: int = 1) -> str:
    if value is None:
        return DASH
    return str(int(value)) if float(value).is_integer() else f"{value:.{digits}f}"


def summarize(agent: str, seed: int, result: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"agent": agent, "seed": seed}
    if "error" in result:
        row["error"] = result["error"]
        return row
    faults = [f for f in result.get("faults") or [] if isinstance(f, dict)]
    row.update(score=_number(result.get("score")), n=len(faults), C=_stage(faults, "correlated"),
               L=_stage(faults, "localized"), R=_stage(faults, "repaired"),
               gap=_number(result.get("declared_done_gap")), think=result.get("think_time"),
               wall=_number(result.get("process_wall_seconds")))
    credits = [_number(f.get("localization_credit")) for f in faults if "localization_credit" in f]
    credits = [c for c in credits if c is not None]
    row["l_credit"] = sum(credits) if credits else None
    cands = [_candidates(f.get("candidates")) for f in faults if "candidates" in f]
    cands = [c for c in cands if c is not None]
    row["max_candidates"] = max(cands) if cands else None
    row["collateral"] = _collateral(result)
    row["r_share"] = 100.0 * row["R"] / len(faults) if faults and row.get("R") is not None else None
    version = result.get("scoring_version")
    if version is None and isinstance(result.get("scoring"), dict):
        version = result["scoring"].get("version")
    row["scoring_version"] = version
    return row


COLUMNS = [("agent", "agent"), ("seed", "seed"), ("think time", "think"), ("score", "score"), ("C", "C"), ("L", "L"),
           ("R", "R"), ("N", "n"), ("R %", "r_share"), ("L credit", "l_credit"), ("max cands", "max_candidates"), ("collateral", "collateral"),
           ("gap", "gap"), ("wall s", "wall")]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(h for h, _ in COLUMNS) + " |",
             "|" + "|".join("---" if k in ("agent", "collateral", "think") else "---:" for _, k in COLUMNS) + "|"]
    for row in rows:
        if "error" in row:
            cells = [row["agent"], str(row["seed"]), f"error: {row['error']}"] + [""] * (len(COLUMNS) - 3)
        else:
            cells = []
            for _, key in COLUMNS:
                v = row.get(key)
                if key in ("agent", "collateral", "think"):
                    cells.append(DASH if v is None else str(v))
                elif key == "seed":
                    cells.append(str(v))
                else:
                    cells.append(_fmt(v, 2 if key == "l_credit" else 1))
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def means(rows: list[dict[str, Any]], agents: list[str]) -> str:
    lines = ["| agent | seeds | mean score | min | max |", "|---|---:|---:|---:|---:|"]
    for agent in agents:
        scores = [r["score"] for r in rows if r["agent"] == agent and r.get("score") is not None]
        if scores:
            lines.append(f"| {agent} | {len(scores)} | {sum(scores) / len(scores):.1f} | {min(scores):.1f} | "
                         f"{max(scores):.1f} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seeds", nargs="*", type=int, default=[1, 2, 3], help="seeds (default: 1 2 3)")
    parser.add_argument("--agents", help=f"comma-separated agent names (default: all {len(AGENTS)}: "
                                         f"{', '.join(AGENTS)}); PKG.MOD:CLASS works too")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="runs in parallel (default 1)")
    parser.add_argument("--out", type=Path, metavar="FILE.json", help="save every run's raw JSON here")
    parser.add_argument("--scenario", type=Path, default=SCENARIO, help="scenario (default: the default marathon)")
    parser.add_argument("--duration", help="override the run length (e.g. 2h) for a quick look")
    parser.add_argument("--step-budget", type=float, help="wall seconds per agent step (passed to the CLI)")
    parser.add_argument("--think-time", metavar="MODE", help="think-time model (passed to the CLI; default: the "
                                                             "scenario's)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="wall seconds per run (default 1800)")
    parser.add_argument("--runs-dir", type=Path, default=REPO / "sremarathon-runs" / "ladder",
                        help="where the bundles go (default: %(default)s)")
    args = parser.parse_args(argv)
    agents = [a.strip() for a in args.agents.split(",") if a.strip()] if args.agents else list(AGENTS)
    args.scenario = args.scenario.resolve()
    jobs = [(agent, seed) for seed in args.seeds for agent in agents]

    runs_dir = args.runs_dir.resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, int], dict[str, Any]] = {}

    def work(job: tuple[str, int]) -> None:
        agent, seed = job
        result = results[job] = run_one(agent, seed, args, runs_dir)
        what = result.get("error") or f"score {result.get('score')}"
        print(f"ladder: {agent} seed {seed}: {what} ({result.get('process_wall_seconds', '?')} s)",
              file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(work, jobs))

    rows = [summarize(agent, seed, results[(agent, seed)]) for agent, seed in jobs]
    rows.sort(key=lambda r: (agents.index(r["agent"]), r["seed"]))
    versions = sorted({str(r["scoring_version"]) for r in rows if r.get("scoring_version")})
    print(f"Baseline ladder — {args.scenario.name}{f' ({args.duration})' if args.duration else ''}, "
          f"seeds {' '.join(map(str, args.seeds))}"
          + (f", scoring version {', '.join(versions)}" if versions else "") + "\n")
    print(table(rows))
    if len(args.seeds) > 1:
        print("\n" + means(rows, agents))
    print("\nC, L, R: faults correlated, localized, repaired (fractional credit summed when the JSON gives it), "
          "of N faults. L credit: sum of per-fault localization_credit; max cands: most candidates named for "
          "one fault; collateral: the non-zero collateral counts; gap: declared-done gap (points).")
    if args.out:
        doc = {"scenario": str(args.scenario), "seeds": args.seeds, "duration": args.duration,
               "runs": [{"agent": a, "seed": s, "result": results[(a, s)]} for a, s in jobs]}
        args.out.write_text(json.dumps(doc, indent=1, default=str))
        print(f"\nraw results: {args.out}", file=sys.stderr)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
