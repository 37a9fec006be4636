"""Agents that try to take the machine down (issue 17): each misbehaves at one step, then
behaves, so the tests see the limit end that step and the next one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pytest_sremarathon import Report

GiB, MiB = 2**30, 2**20


def hold_3gb() -> list[bytearray]:
    """3 GB, touched (bytearray zero-fills), in 64 MB pieces: held, not just reserved."""
    return [bytearray(64 * MiB) for _ in range(3 * GiB // (64 * MiB))]


def fork_children(n: int, pid_file: Path) -> None:
    """``n`` children that leave the process group (setsid) and would sleep for five minutes."""
    with open(pid_file, "a") as f:
        for _ in range(n):
            child = subprocess.Popen(["sleep", "300"], start_new_session=True)
            f.write(f"{child.pid}\n")
            f.flush()


def fill(workspace: Path, total: int, piece: int = 32 * MiB) -> None:
    block = b"x" * MiB
    for i in range(total // piece):
        with open(workspace / f"fill-{i}.bin", "wb") as f:
            for _ in range(piece // MiB):
                f.write(block)


class _Once:
    """Misbehaves at its first step only (a restarted process knows from the workspace)."""

    def setup(self, env) -> None:
        self.workspace = Path(env.workspace)

    def step(self, obs) -> Report:
        mark = self.workspace / f".{type(self).__name__}-done"
        if not mark.exists():
            mark.write_text("x")
            self.misbehave(obs)
        return Report(notes=f"step {obs.step}: fine")

    def misbehave(self, obs) -> None:
        raise NotImplementedError


class Hog3G(_Once):
    def misbehave(self, obs) -> None:
        self.held = hold_3gb()


class Forker(_Once):
    def misbehave(self, obs) -> None:
        import time

        fork_children(25, self.workspace / "children.pids")
        time.sleep(30)  # holds them: the watchdog ends this


class Filler(_Once):
    def misbehave(self, obs) -> None:
        fill(self.workspace, 1 * GiB)


if __name__ == "__main__":  # the same misbehaviour as a per-step command: python limit_agents.py WHAT
    what, ws = sys.argv[1], Path.cwd()
    step = int(os.environ["SREMARATHON_STEP"])
    if what == "hog":
        held = hold_3gb()
    elif what == "hog-children":  # 4 children of 200 MB each: each under RLIMIT_DATA, together over
        procs = [subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(200 * 2**20); time.sleep(60)"])
                 for _ in range(4)]
        for p in procs:
            p.wait()
    elif what == "fork":
        fork_children(25, ws / "children.pids")
        import time

        time.sleep(30)
    elif what == "fill":
        fill(ws, 1 * GiB)
    elif what == "marathon":  # one misbehaviour a step, then a report on stdout
        if step == 1:
            held = hold_3gb()
        elif step == 2:
            fork_children(25, ws / "children.pids")
            import time

            time.sleep(30)
        elif step == 3:
            fill(ws, 1 * GiB)
        print(json.dumps({"notes": f"step {step}: fine"}))
