"""The service image, built and run by a real Docker: what the pipeline's build step produces
for a real cluster (``docker build`` of the generated context), serving the artifact's code.

Runs where a Docker daemon answers and the base image is present (``python:3.11-slim``, or
``$SREMARATHON_BASE_IMAGE``; ``.ci/run`` builds one from Debian); skips and says why elsewhere.
Nothing is pulled or pushed: images are tagged under a registry name of this run and removed.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from pytest_sremarathon.apps import load_app
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.kube import images
from pytest_sremarathon.pipeline.build import package
from pytest_sremarathon.runtime.code import Artifact

pytestmark = pytest.mark.docker

SHOP = APPS_DIR / "shop"


def _docker(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


@pytest.fixture(scope="module")
def currency(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Artifact, str]]:
    why = images.docker_unavailable()
    if why is not None:
        pytest.skip(f"the image tests need a running Docker: {why}")
    base = images.base_image()
    if subprocess.run(["docker", "image", "inspect", base], capture_output=True).returncode != 0:
        pytest.skip(f"the base image {base} is not present: `docker pull {base}`, or set SREMARATHON_BASE_IMAGE "
                    "to a Python 3.11 image with pip")
    app = load_app(SHOP)
    files = {str(p.relative_to(SHOP)): p.read_text() for p in sorted((SHOP / "services").glob("*.py"))}
    artifact = package(app, files)["currency"]
    publisher = images.RegistryImages(tmp_path_factory.mktemp("images"),
                                      registry=f"sremarathon-test.local/{uuid.uuid4().hex[:8]}")
    tag = publisher.build(artifact)
    try:
        yield artifact, tag
    finally:
        _docker("rmi", "-f", tag, check=False)


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_image_carries_the_artifact_digest_and_runs_unprivileged(currency: tuple[Artifact, str]) -> None:
    artifact, tag = currency
    config = json.loads(_docker("image", "inspect", "--format", "{{json .Config}}", tag))
    assert config["Labels"]["dev.sremarathon.digest"] == artifact.digest  # the digest the twin records
    assert config["Labels"]["dev.sremarathon.service"] == "currency"
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["python", "-m", "pytest_sremarathon.runtime"]


def test_the_container_serves_the_code_with_probes_metrics_and_tracebacks(currency: tuple[Artifact, str]) -> None:
    _, tag = currency
    env = yaml.safe_load((SHOP / "config" / "currency.yaml").read_text())  # what envFrom gives the pod
    argv = ["run", "-d", "-p", "127.0.0.1::8080"] + [a for k, v in env.items() for a in ("-e", f"{k}={v}")] + [tag]
    container = _docker(*argv).strip()
    try:
        _, port = _docker("port", container, "8080/tcp").splitlines()[0].rsplit(":", 1)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/readyz", timeout=2) as resp:
                    assert resp.status == 200
                    break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise AssertionError(f"not ready within 30 s; logs:\n{_docker('logs', container)}") from None
                time.sleep(0.3)

        assert _post(f"{base}/convert", {"from": "EUR", "to": "USD", "amount": 100}) == \
            (200, {"amount": 113.05, "currency": "USD"})
        status, _ = _post(f"{base}/convert", {"from": "XXX", "to": "USD", "amount": 1})
        assert status == 500  # the service's own bug, as a real 500
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        assert 'sremarathon_requests_total{app="shop",service="currency",endpoint="convert",code="200"} 1' in metrics
        assert 'sremarathon_requests_total{app="shop",service="currency",endpoint="convert",code="500"} 1' in metrics
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
        logs = logs.stdout + logs.stderr  # the container's stdout and stderr
        assert 'File "/app/services/currency.py"' in logs
        assert "ValueError: unsupported currency pair XXX->USD" in logs
    finally:
        _docker("rm", "-f", container, check=False)
