"""Init containers on the twin, as real ``kubectl`` shows them: the app container waits until
every init container exited 0; a failing one is restarted with back-off (``Init:Error``,
``Init:CrashLoopBackOff``), its own log is ``kubectl logs -c``, and ``describe`` lists it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.kubectl import find_kubectl, kubectl_for
from support.twins import AgentSimulation

TOKEN = "init-agent-token"
pytestmark = pytest.mark.skipif(find_kubectl() is None, reason="kubectl is not installed")


def _pod(name: str, script: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "shop", "labels": {"run": name}},
        "spec": {"initContainers": [{"name": "wait-for-cache", "image": "busybox:1.36",
                                     "command": ["sh", "-c", script]}],
                 "containers": [{"name": "main", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}})


# shop is hardened (default-deny ingress; cart-cache admits only app=cart): a new workload that
# calls the cache needs its own allow rule, as on a real cluster, or its packets are dropped.
ALLOW_TEST_PODS = json.dumps({
    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
    "metadata": {"name": "cart-cache-allow-init-test-pods", "namespace": "shop"},
    "spec": {"podSelector": {"matchLabels": {"app": "cart-cache"}}, "policyTypes": ["Ingress"],
             "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                 {"key": "run", "operator": "In", "values": ["good", "bad"]}]}}]}]}})


def test_init_containers_gate_the_app_container(tmp_path: Path) -> None:
    sim = AgentSimulation(tmp_path, TOKEN)
    try:
        kubectl = kubectl_for(sim.kubeconfig, tmp_path / "cache")
        kubectl("apply", "-f", "-", input=ALLOW_TEST_PODS)
        kubectl("apply", "-f", "-", input=_pod("good", "nc -z -w 2 cart-cache 6379 && echo cart-cache is up"))
        kubectl("apply", "-f", "-", input=_pod(
            "bad", "for i in 1 2 3; do nc -z -w 2 cart-cache 6380 && exit 0; echo waiting for cart-cache:6380; "
                   "sleep 2; done; echo cart-cache:6380 not reachable; exit 1"))
        sim.run(30)
        table = kubectl("-n", "shop", "get", "pods", "good", "bad", "--no-headers")
        rows = {line.split()[0]: line.split() for line in table.splitlines()}
        assert rows["good"][1:3] == ["1/1", "Running"], table
        assert rows["bad"][1] == "0/1" and rows["bad"][2] in ("Init:0/1", "Init:Error"), table
        good = kubectl.json("-n", "shop", "get", "pod", "good")
        assert good["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
        assert "cart-cache is up" in kubectl("-n", "shop", "logs", "good", "-c", "wait-for-cache")

        sim.run(120)
        table = kubectl("-n", "shop", "get", "pod", "bad", "--no-headers")
        assert table.split()[2] in ("Init:CrashLoopBackOff", "Init:Error"), table
        bad = kubectl.json("-n", "shop", "get", "pod", "bad")
        init = bad["status"]["initContainerStatuses"][0]
        assert init["restartCount"] >= 1 and init["lastState"]["terminated"]["exitCode"] == 1
        assert bad["status"]["phase"] == "Pending"
        assert bad["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
        initialized = next(c for c in bad["status"]["conditions"] if c["type"] == "Initialized")
        assert initialized["status"] == "False" and initialized["reason"] == "ContainersNotInitialized"
        assert "cart-cache:6380 not reachable" in kubectl("-n", "shop", "logs", "bad", "-c", "wait-for-cache")
        waiting = kubectl.run("-n", "shop", "logs", "bad", check=False)
        assert waiting.returncode != 0 and "PodInitializing" in waiting.stderr
        described = kubectl("-n", "shop", "describe", "pod", "bad")
        assert "Init Containers:" in described and "wait-for-cache:" in described
        assert "Back-off restarting failed container wait-for-cache" in described
        # a CrashLoopBackOff shows once the back-off is longer than a tick
        sim.run(240)
        assert kubectl("-n", "shop", "get", "pod", "bad", "--no-headers").split()[2] == "Init:CrashLoopBackOff"
    finally:
        sim.close()

