"""`sremarathon twin up` prints where the monitoring services (Prometheus, Alertmanager, the
Jaeger query) answer."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import yaml


def test_twin_up_prints_the_prometheus_url_and_it_answers(tmp_path: Path, write_scenario) -> None:
    kubeconfig = tmp_path / "twin.kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "pytest_sremarathon.cli", "twin", "up", "--scenario",
                             str(write_scenario(apps=["shop"])), "--kubeconfig", str(kubeconfig)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("  kubectl get --raw"):
                break
        url = next(ln.split()[1] for ln in lines if ln.startswith("prometheus: "))
        assert url.startswith("http://127.0.0.1:") and url.endswith("/prometheus")
        assert "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/api/v1/query" in lines[-1]
        token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
        req = urllib.request.Request(url + "/api/v1/query?" + urllib.parse.urlencode({"query": "count(up)"}),
                                     headers={"Authorization": f"Bearer {token}"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=30) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success" and float(body["data"]["result"][0]["value"][1]) > 20
        # Alertmanager and the Jaeger query beside it, behind the same token
        urls = {ln.split(":", 1)[0]: ln.split()[1] for ln in lines if ln.startswith(("alertmanager: ", "jaeger-query: "))}
        assert urls["alertmanager"].endswith("/alertmanager") and urls["jaeger-query"].endswith("/jaeger")
        for url in (urls["alertmanager"] + "/api/v2/status", urls["jaeger-query"] + "/api/services"):
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            with opener.open(req, timeout=30) as resp:
                assert resp.status == 200 and json.loads(resp.read())
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
