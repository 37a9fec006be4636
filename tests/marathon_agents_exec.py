"""An agent that investigates from inside the cluster (tests/test_exec_marathon.py), imported by
name in the agent's own process: at its first step it execs into a pod, runs a busybox debug
pod, tries an exec the policy forbids, and keeps an interactive exec open while it reads the
cluster (which must not wait for the session). It reports what it saw in its notes (JSON)."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

from pytest_sremarathon import Report


def _kubectl(*args: str, input: str = "", timeout: float = 60) -> dict:
    started = time.monotonic()
    proc = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, timeout=timeout)
    return {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr,
            "wall": round(time.monotonic() - started, 2)}


class ExecAgent:
    def __init__(self) -> None:
        self.done = False

    def step(self, obs: Any) -> Report:
        if self.done:
            return Report(notes="{}")
        self.done = True
        pods = _kubectl("get", "pods", "-n", "shop", "-l", "app=cart", "-o", "jsonpath={.items[0].metadata.name}")
        cart = pods["out"].strip()
        seen: dict = {"cart": cart}
        seen["env"] = _kubectl("exec", "-n", "shop", cart, "--", "sh", "-c", "env | grep REQUEST_TIMEOUT_MS")
        seen["exit"] = _kubectl("exec", "-n", "shop", cart, "--", "sh", "-c", "exit 3")
        seen["debug"] = _kubectl("run", "probe", "--rm", "-i", "--restart=Never", "--image=busybox", "--",
                                 "wget", "-qO-", "http://cart.shop:8080/healthz")
        seen["denied"] = self._exec_in_kube_system(obs)
        # An interactive session stays open while the agent goes on reading the cluster.
        session = subprocess.Popen(["kubectl", "exec", "-i", "-n", "shop", cart, "--", "sh"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert session.stdin is not None
        session.stdin.write("hostname\n")
        session.stdin.flush()
        time.sleep(1.0)
        seen["meanwhile"] = _kubectl("get", "pods", "-n", "shop", "-o", "name", timeout=30)
        session.stdin.write("exit 4\n")
        session.stdin.flush()
        out, err = session.communicate(timeout=30)
        seen["session"] = {"rc": session.returncode, "out": out, "err": err}
        return Report(notes=json.dumps(seen))

    @staticmethod
    def _exec_in_kube_system(obs: Any) -> str:
        """The official client's exec (kubectl would GET the pod first): the policy answers."""
        from kubernetes import client, config
        from kubernetes.stream import stream

        api = client.CoreV1Api(config.new_client_from_config(config_file=str(obs.kubeconfig)))
        try:
            stream(api.connect_get_namespaced_pod_exec, "anything", "kube-system", command=["true"], stderr=True,
                   stdin=False, stdout=True, tty=False)
        except Exception as exc:  # noqa: BLE001 - what the client raised is the result
            return f"{type(exc).__name__}: {exc}"
        return "allowed"
