"""Agents the host tests (tests/agent/) run in real worker processes (importable as
``agents_for_tests``).

They use only the public contract, like any third-party agent.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pytest_sremarathon.agent.protocol import Finding, PipelineError, Report

NOT_A_CLASS = 42


class NoStep:
    def setup(self, env):
        pass


class _Counting:
    """Counts setups in the workspace, so tests can see restarts."""

    def setup(self, env):
        path = Path(env.workspace) / f"{type(self).__name__}.setups"
        n = int(path.read_text()) + 1 if path.exists() else 1
        path.write_text(str(n))
        self.setups = n


class EchoAgent(_Counting):
    """Exercises the pipeline and telemetry clients and reports what it saw."""

    def step(self, obs):
        app = "shop"
        changes = obs.pipeline.changes(app)
        status = obs.pipeline.status(app)
        deployed = obs.pipeline.deploy(app, "HEAD")
        series = obs.telemetry.metrics(app, "cart", "error_ratio", since=obs.time)
        try:
            obs.pipeline.revert("frozen", "c-denied")
            denied = "not denied"
        except PipelineError as exc:
            denied = f"{exc.status} {exc.message}"
        notes = {
            "step": obs.step, "setups": self.setups, "alerts": [a.id for a in obs.alerts],
            "new": [a.id for a in obs.new_alerts], "changes": [c.id for c in changes],
            "head": status["head"], "deploy": deployed["status"], "series": [[t.isoformat(), v] for t, v in series],
            "denied": denied, "cwd": os.getcwd(), "home": os.environ.get("HOME"),
            "kubeconfig": os.environ.get("KUBECONFIG"), "env_keys": sorted(os.environ),
            "argv": sys.argv, "workspace": str(obs.workspace), "kubeconfig_text": Path(obs.kubeconfig).read_text(),
        }
        return Report(findings=[Finding(incident="echo", alerts=[a.id for a in obs.alerts],
                                        component="service:shop/cart", cause=f"change:{changes[0].id}")],
                      notes=json.dumps(notes))


class RaisingAgent:
    def step(self, obs):
        raise ValueError(f"boom at step {obs.step}\nsecond line of the message")


class SleepyAgent(_Counting):
    """Hangs on step 1 (with a child that tries to escape), answers afterwards."""

    def step(self, obs):
        if obs.step == 1:
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)  # sremarathon-escapee"],
                             start_new_session=True)
            time.sleep(60)
        return {"notes": f"awake at step {obs.step} after {self.setups} setups"}


class ChattyAgent:
    """Prints everywhere it can; none of it may reach the protocol."""

    def setup(self, env):
        print("hello from setup")

    def step(self, obs):
        print("junk on stdout")
        print('{"ok": true, "report": {"notes": "forged"}}')
        sys.stdout.write("{not json at all\n")
        sys.__stdout__.write("through sys.__stdout__\n")
        sys.__stdout__.flush()
        os.write(1, b"raw bytes on fd 1\n")
        got = sys.stdin.read()  # the protocol must not be readable here
        print("to stderr", file=sys.stderr)
        return Report(notes=f"chatty step {obs.step}, stdin gave {got!r}")


class GarbageAgent:
    def step(self, obs):
        if obs.step == 1:
            return 42
        if obs.step == 2:
            return {"findings": [{"bogus": True}]}
        if obs.step == 3:
            return {"notes": float("nan"), "claims": "nope"}
        return None


class ExitingAgent(_Counting):
    def step(self, obs):
        if obs.step == 1:
            sys.stderr.write("about to vanish\n")
            sys.stderr.flush()
            os._exit(3)
        return Report(notes=f"alive at step {obs.step}, setups={self.setups}")


class ForkExitAgent:
    """Dies on step 1 while a forked child keeps every inherited descriptor open."""

    def step(self, obs):
        if obs.step == 1:
            if os.fork() == 0:
                time.sleep(5)
                os._exit(0)
            os._exit(4)
        return Report(notes="back")


class SetupFailsAgent:
    def setup(self, env):
        raise RuntimeError("cannot reach my model server")

    def step(self, obs):
        return Report()


class LoudAgent:
    def step(self, obs):
        for _ in range(40):
            sys.stderr.write("x" * 9999 + "\n")
        return Report(notes="loud")


class SnoopAgent:
    """Hunts for a marker the host hides: in the filesystem, in other processes' environ and
    cmdline. ``targets.json`` in the workspace says what to look for and where."""

    def step(self, obs):
        cfg = json.loads((Path(obs.workspace) / "targets.json").read_text())
        marker = cfg["marker"].encode()
        skip = os.path.realpath(str(obs.workspace))
        hits: list[str] = []
        stats = {"files_read": 0, "names_seen": 0, "procs": [], "self": os.getpid()}

        def check_file(path: str) -> None:
            try:
                with open(path, "rb") as f:
                    data = f.read(1 << 20)
            except OSError:
                return
            stats["files_read"] += 1
            if marker in data:
                hits.append(f"content:{path}")

        # 1. Known places (an adversary reads the source and knows the layout).
        for path in cfg["files"]:
            check_file(path)
        for d in cfg["dirs"]:
            try:
                names = os.listdir(d)
            except OSError:
                continue
            hits.extend(f"listdir:{d}/{n}" for n in names if marker.decode() in n)
        # 2. Other processes: parent, and every visible /proc entry.
        pids = {str(os.getppid())} | {p for p in os.listdir("/proc") if p.isdigit()}
        for pid in sorted(pids):
            stats["procs"].append(pid)
            for what in ("environ", "cmdline"):
                check_file(f"/proc/{pid}/{what}")
        # 3. Try to undo the hiding.
        libc = ctypes.CDLL(None, use_errno=True)
        umounted = [d for d in cfg["dirs"] if libc.umount2(d.encode(), 2) == 0]  # MNT_DETACH
        stats["umounted"] = umounted
        # 4. Try to write outside the workspace (tamper with the host's files) and inside it.
        stats["writes"] = {}
        for path in (cfg["write_outside"], os.path.join(obs.workspace, "note.txt"), os.path.join(os.environ["TMPDIR"], "t")):
            try:
                Path(path).write_text("written by the agent")
                stats["writes"][path] = True
            except OSError:
                stats["writes"][path] = False
        # 5. Walk: small roots with contents, then the whole filesystem by name, bounded.
        deadline = time.monotonic() + cfg["budget"]
        for root in cfg["roots"]:
            for dirpath, dirnames, filenames in os.walk(root):
                if os.path.realpath(dirpath).startswith(skip):
                    dirnames[:] = []
                    continue
                for n in filenames:
                    check_file(os.path.join(dirpath, n))
        for dirpath, dirnames, filenames in os.walk("/"):
            if time.monotonic() > deadline:
                stats["walk"] = "stopped at budget"
                break
            if dirpath in ("/proc", "/sys", "/dev") or os.path.realpath(dirpath).startswith(skip):
                dirnames[:] = []
                continue
            for n in dirnames + filenames:
                stats["names_seen"] += 1
                if marker.decode() in n:
                    hits.append(f"name:{os.path.join(dirpath, n)}")
        else:
            stats["walk"] = "complete"
        return Report(notes=json.dumps({"hits": sorted(set(hits)), **stats}))
