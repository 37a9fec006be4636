"""The node-fault commands run for real against node containers in two zones: ``iptables``
partitions, ``tc`` latency and ``docker pause`` — what a kind cluster's nodes get, on plain
containers with the same tools (a kind node is a container with ``iptables`` and ``tc``).

Runs where a Docker daemon answers and the base image is present (see test_images_docker.py);
skips and says why elsewhere.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Optional

import pytest

from pytest_sremarathon.kube import images, node_faults
from pytest_sremarathon.kube.node_faults import NodeInfo

pytestmark = pytest.mark.docker

NODE_DOCKERFILE = """ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 iptables >/dev/null \\
    && rm -rf /var/lib/apt/lists/*
"""


def _docker(*args: str, input: Optional[str] = None, timeout: float = 300) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, input=input, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[NodeInfo]]:
    why = images.docker_unavailable()
    if why is not None:
        pytest.skip(f"the node-fault tests need a running Docker: {why}")
    base = images.base_image()
    if subprocess.run(["docker", "image", "inspect", base], capture_output=True).returncode != 0:
        pytest.skip(f"the base image {base} is not present: `docker pull {base}`, or set SREMARATHON_BASE_IMAGE")
    run = uuid.uuid4().hex[:8]
    image, network = f"sremarathon-test.local/{run}/node:test", f"sremarathon-test-{run}"
    _docker("build", "--quiet", "--tag", image, "--build-arg", f"BASE_IMAGE={base}", "-", input=NODE_DOCKERFILE)
    _docker("network", "create", network)
    out: list[NodeInfo] = []
    try:
        for zone in ("a", "b"):
            for i in (1, 2):
                container = f"sremarathon-test-{run}-{zone}{i}"
                _docker("run", "-d", "--name", container, "--network", network, "--cap-add", "NET_ADMIN",
                        image, "python3", "-m", "http.server", "8000")
                address = _docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                                  container).strip()
                out.append(NodeInfo(f"worker-{zone}{i}", f"zone-{zone}", address, (), container))
        for node in out:  # every node serves before any fault
            assert _seconds(out[0], node, timeout=10) is not None
        yield out
    finally:
        for node in out:
            subprocess.run(["docker", "rm", "-f", node.container], capture_output=True)
        subprocess.run(["docker", "network", "rm", network], capture_output=True)
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True)


def _seconds(src: NodeInfo, dst: NodeInfo, timeout: float = 1.5) -> Optional[float]:
    """How long an HTTP request from one node to another takes; None when it does not arrive."""
    probe = ("import time, urllib.request as u\n"
             "t = time.monotonic()\n"
             f"u.urlopen('http://{dst.address}:8000/', timeout={timeout}).read()\n"
             "print(time.monotonic() - t)\n")
    proc = subprocess.run(["docker", "exec", src.container, "python3", "-c", probe], capture_output=True, text=True,
                          timeout=timeout + 30)
    return float(proc.stdout) if proc.returncode == 0 else None


def test_a_zone_partition_drops_cross_zone_traffic_only_until_cleanup(nodes: list[NodeInfo]) -> None:
    a1, a2, b1, b2 = nodes
    action = node_faults.zone_partition(nodes, "zone-a", "zone-b")
    node_faults.inject(action)
    try:
        assert _seconds(a1, b1) is None and _seconds(b2, a2) is None  # both directions
        assert _seconds(a1, a2) is not None and _seconds(b1, b2) is not None  # inside a zone: untouched
        node_faults.inject(action)  # injecting twice keeps one set of rules
    finally:
        node_faults.cleanup(action)
    assert _seconds(a1, b1) is not None and _seconds(b2, a2) is not None
    assert "SREM-" not in _docker("exec", a1.container, "iptables", "-S")


def _without_netem(node: NodeInfo) -> Optional[str]:
    """Why ``tc`` cannot add the latency qdiscs here (the host kernel's, shared by containers)."""
    probe = (f"tc qdisc add dev {node_faults.IFACE} root handle 1: prio bands 4 && "
             f"tc qdisc add dev {node_faults.IFACE} parent 1:4 handle 40: netem delay 1ms; rc=$?; "
             f"tc qdisc del dev {node_faults.IFACE} root 2>/dev/null; exit $rc")
    proc = subprocess.run(["docker", "exec", node.container, "sh", "-c", probe], capture_output=True, text=True)
    return None if proc.returncode == 0 else proc.stderr.strip().splitlines()[0]


def test_zone_latency_slows_traffic_leaving_the_zone_only(nodes: list[NodeInfo]) -> None:
    a1, a2, b1, _ = nodes
    why = _without_netem(a1)
    if why is not None:
        pytest.skip(f"this host's kernel cannot add the prio and netem qdiscs ({why}): "
                    "it needs CONFIG_NET_SCH_PRIO and CONFIG_NET_SCH_NETEM, as kind's zone latency does")
    action = node_faults.zone_latency(nodes, "zone-a", 400)
    node_faults.inject(action)
    try:
        slow = _seconds(a1, b1, timeout=5)
        assert slow is not None and slow >= 0.4
        fast = _seconds(a1, a2)
        assert fast is not None and fast < 0.2
    finally:
        node_faults.cleanup(action)
    after = _seconds(a1, b1)
    assert after is not None and after < 0.2


def test_a_paused_node_answers_nothing_until_unpaused(nodes: list[NodeInfo]) -> None:
    a1, _, b1, b2 = nodes
    action = node_faults.zone_outage(nodes, "zone-b")
    node_faults.inject(action)
    try:
        assert _docker("inspect", "-f", "{{.State.Paused}}", b1.container).strip() == "true"
        assert _seconds(a1, b1) is None and _seconds(a1, b2) is None
    finally:
        node_faults.cleanup(action)
    assert _seconds(a1, b1) is not None and _seconds(a1, b2) is not None
