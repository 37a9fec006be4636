"""Real ``kubectl exec`` against the test server: kubectl >= 1.30 streams exec over WebSocket
(``v5.channel.k8s.io``) and takes its exit code from the Status on channel 3."""

from __future__ import annotations

import dataclasses
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest
from support.exec_server import ExecTestServer
from support.kubectl import Kubectl, find_kubectl, kubectl_for, require_kubectl

pytestmark = pytest.mark.skipif(find_kubectl() is None, reason="kubectl is not installed")


@pytest.fixture
def kubectl(exec_server: ExecTestServer, tmp_path: Path) -> Kubectl:
    return kubectl_for(exec_server.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path / "cache")


def test_exit_code_and_separate_streams(kubectl: Kubectl, exec_server: ExecTestServer) -> None:
    r = kubectl.run("exec", "p", "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert r.returncode == 3
    assert r.stdout == "out\n"
    assert r.stderr == "err\ncommand terminated with exit code 3\n"
    assert exec_server.last_result().protocol == "v5.channel.k8s.io"


def test_success_and_env(kubectl: Kubectl) -> None:
    r = kubectl.run("exec", "p", "--", "env", check=False)
    assert (r.returncode, r.stderr) == (0, "")
    assert "DB_URL=postgres://orders-db:5432/orders\n" in r.stdout


def test_namespace_and_curl_through_the_network(kubectl: Kubectl) -> None:
    r = kubectl.run("exec", "-n", "shop", "cart-7d9f8b-x2x", "--", "sh", "-c",
                    "curl -s -o /dev/null -w '%{http_code}' http://cart.shop:8080/fail; curl -sf http://cart:8080/fail",
                    check=False)
    assert (r.returncode, r.stdout) == (22, "503")


def test_unknown_command_exits_127(kubectl: Kubectl) -> None:
    r = kubectl.run("exec", "p", "--", "sh", "-c", "nosuch", check=False)
    assert (r.returncode, r.stderr) == (127, "sh: nosuch: not found\ncommand terminated with exit code 127\n")


def test_piped_stdin(kubectl: Kubectl) -> None:
    r = kubectl.run("exec", "-i", "p", "--", "sh", input="echo hi\nhostname\nexit 5\n", check=False)
    assert (r.returncode, r.stdout) == (5, "hi\np\n")
    r = kubectl.run("exec", "-i", "p", "--", "cat", input="piped data\n", check=False)
    assert (r.returncode, r.stdout) == (0, "piped data\n")


def test_missing_executable_is_an_internal_error(kubectl: Kubectl) -> None:
    r = kubectl.run("exec", "p", "--", "bash", check=False)
    assert r.returncode == 1
    assert r.stderr.startswith("error: Internal error occurred: error executing command in container: ")
    assert 'exec: "bash": executable file not found in $PATH: unknown' in r.stderr


def test_container_flag_and_default_container(kubectl: Kubectl, exec_server: ExecTestServer) -> None:
    r = kubectl.run("exec", "two", "-c", "sidecar", "--", "hostname", check=False)
    assert (r.returncode, r.stdout) == (0, "two\n")
    assert exec_server.last_result().options.container == "sidecar"
    r = kubectl.run("exec", "two", "--", "true", check=False)
    assert r.returncode == 0 and 'Defaulted container "app" out of: app, sidecar' in r.stderr


def test_missing_pod(kubectl: Kubectl) -> None:
    r = kubectl.run("exec", "nope", "--", "true", check=False)
    assert r.returncode == 1 and 'pods "nope" not found' in r.stderr


def test_interactive_tty(kubectl: Kubectl, exec_server: ExecTestServer) -> None:
    """``kubectl exec -it p -- sh`` on a real terminal: prompt, echo, line editing, exit code."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(kubectl.argv("exec", "-it", "p", "--", "sh"), stdin=slave, stdout=slave, stderr=slave,
                            close_fds=True, env=kubectl.environ())
    os.close(slave)
    seen = b""

    def read_until(token: bytes, timeout: float = 20.0) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while token not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    return

    try:
        read_until(b"/ # ")
        os.write(master, b"echo hi $((2*3))\r")
        read_until(b"hi 6")
        os.write(master, b"ls /etc/confix\x7fg\r")
        read_until(b"features.json")
        os.write(master, b"exit 4\r")
        read_until(b"exit code 4")
        assert proc.wait(20) == 4
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert b"/ # echo hi $((2*3))\r\nhi 6\r\n" in seen
    assert b"app.yaml  features.json\r\n" in seen
    result = exec_server.last_result()
    assert result.options.tty and not result.options.stderr


@pytest.mark.parametrize("version", ["1.30", "1.31", "1.33"])
def test_other_kubectl_versions(kubectl: Kubectl, version: str) -> None:
    older = dataclasses.replace(kubectl, binary=require_kubectl(version))
    r = older.run("exec", "p", "--", "sh", "-c", "echo v; exit 2", check=False)
    assert (r.returncode, r.stdout) == (2, "v\n")


def test_spdy_only_kubectl_gets_a_clear_error(kubectl: Kubectl) -> None:
    v129 = dataclasses.replace(kubectl, binary=require_kubectl("1.29"))
    r = v129.run("exec", "p", "--", "true", check=False)
    assert r.returncode == 1 and "SPDY is not supported" in r.stderr and "Upgrade request required" in r.stderr
    r = v129.run("exec", "p", "--", "sh", "-c", "exit 6", check=False, env={"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "true"})
    assert r.returncode == 6
