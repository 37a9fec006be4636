"""kr8s ``Pod.exec`` (v4.channel.k8s.io through httpx-ws) against the test server. kr8s is not a
dependency: the test runs when it is importable, or from a directory named by
``SREMARATHON_KR8S_PATH`` (a ``pip install --target`` of it, which brings its own pins and so
runs in a subprocess of its own)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.exec_server import ExecTestServer

EXTRA = os.environ.get("SREMARATHON_KR8S_PATH", "")


def _python_path() -> str:
    if EXTRA:
        return EXTRA
    if importlib.util.find_spec("kr8s") is not None:
        return os.pathsep.join(p for p in sys.path if p)
    pytest.skip("kr8s is not installed (set SREMARATHON_KR8S_PATH to a pip --target directory of it)")


SCRIPT = """
import json, sys
import kr8s
api = kr8s.api(kubeconfig=sys.argv[1])
pod = kr8s.objects.Pod.get("p", namespace="default", api=api)
out = []
for cmd in (["sh", "-c", "echo out; echo err >&2; exit 3"], ["cat", "/etc/config/app.yaml"]):
    ex = pod.exec(cmd, check=False)
    out.append([ex.returncode, ex.stdout.decode(), ex.stderr.decode()])
print(json.dumps(out))
"""


def test_kr8s_pod_exec(exec_server: ExecTestServer, tmp_path: Path) -> None:
    path = _python_path()
    config = exec_server.write_kubeconfig(tmp_path / "kubeconfig")
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(config)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": path}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [
        [3, "out\n", "err\n"], [0, "port: 8080\nlog_level: debug\ntimeout_ms: 250\n", ""]]
    assert exec_server.last_result().protocol == "v4.channel.k8s.io"
