"""Agents used by the end-to-end tests (imported by name in the agent's own process)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pytest_sremarathon import Report

SECRET_ENV = "SREMARATHON_TEST_SECRET"


class RaiseEveryStep:
    def step(self, obs):
        raise RuntimeError(f"agent bug at step {obs.step}")


class SleepPastBudget:
    def step(self, obs):
        time.sleep(30)
        return Report()


class GroundTruthSnoop:
    """Looks everywhere it can for the run's ground truth and reports what it saw."""

    def __init__(self) -> None:
        self.done = False

    def step(self, obs):
        if self.done:
            return Report()
        self.done = True
        found = []
        deadline = time.monotonic() + 15
        names = ("ground_truth.json", "events.jsonl", "changes.yaml")
        for root, dirs, files in os.walk("/", onerror=lambda e: None):
            if root.startswith(("/proc", "/sys", "/dev")) or time.monotonic() > deadline:
                dirs[:] = []
                continue
            for f in files:
                if f in names or f.endswith(".tar.gz") and "seed" in f:
                    found.append(os.path.join(root, f))
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            for what in ("environ", "cmdline"):
                try:
                    data = Path(f"/proc/{pid}/{what}").read_bytes()
                except OSError:
                    continue
                if SECRET_ENV.encode() in data or b"pytest_sremarathon.cli" in data:
                    found.append(f"/proc/{pid}/{what}")
        if SECRET_ENV in os.environ:
            found.append("own environment")

        def age(path: str) -> float:
            try:
                return -os.stat(path).st_mtime
            except OSError:
                return 0.0

        # The run in progress writes as we look: if it were visible it would be the newest.
        found.sort(key=lambda p: (not p.startswith(("/proc", "own")), age(p)))
        return Report(notes="FOUND:" + "|".join(found[:100]))


class KubectlTouches:
    """At its first step, one real ``kubectl`` command of each kind an agent uses, in order:
    metadata-only writes and a no-op spec field first, then writes that change what mitigation
    conditions read (tests/test_provenance.py checks which of them made a ``truth.effect``)."""

    COMMANDS = [
        ["annotate", "deployment/cart", "-n", "shop", "sremarathon.test/touched=1"],      # metadata only
        ["label", "node", "{node}", "sremarathon.test/touched=1"],                       # metadata only
        ["patch", "deployment/cart", "-n", "shop", "--type", "merge",
         "-p", '{"spec":{"revisionHistoryLimit":9}}'],                                    # read by no condition
        ["rollout", "restart", "deployment/cart", "-n", "shop"],                          # template
        ["scale", "deployment/frontend", "-n", "shop", "--replicas=4"],                  # replicas
        ["scale", "deployment/ad", "-n", "shop", "--replicas=2"],                        # the same count: no-op
        ["set", "env", "deployment/payment", "-n", "shop", "SREMARATHON_TEST=1"],         # template
        ["cordon", "{node}"],                                                             # unschedulable
    ]

    def step(self, obs):
        import shutil
        import subprocess

        if obs.step != 1:
            return Report()
        kubectl = shutil.which("kubectl") or "kubectl"
        base = [kubectl, "--kubeconfig", str(obs.kubeconfig)]
        node = subprocess.run(base + ["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"],
                              capture_output=True, text=True, timeout=60).stdout.strip()
        results = []
        for cmd in self.COMMANDS:
            proc = subprocess.run(base + [part.replace("{node}", node) for part in cmd], capture_output=True,
                                  text=True, timeout=60)
            results.append(f"{proc.returncode}:{proc.stderr.strip()[:200]}")
        return Report(notes="|".join(results))


class CatalogueSnoop:
    """Looks for the change catalogues the package ships, where the installed package itself
    says they are (site-packages or a checkout), and in ``roots`` (a subclass's), and reports
    what it could read."""

    roots: tuple[str, ...] = ()

    def step(self, obs):
        import json

        from pytest_sremarathon.builtin import APPS_DIR

        read = []
        for root in (APPS_DIR, *map(Path, self.roots)):
            for app in sorted(os.listdir(root)):
                changes = root / app / "changes"
                try:
                    names = os.listdir(changes)
                except OSError:
                    continue
                for name in names:
                    try:
                        read.append(f"{changes / name} ({len((changes / name).read_bytes())} bytes)")
                    except OSError:
                        pass
        return Report(notes="CATALOGUE:" + json.dumps({
            "apps_dir": str(APPS_DIR), "read": read,
            "app_code_visible": [(Path(r) / "shop" / "services").is_dir() for r in (APPS_DIR, *self.roots)]}))
