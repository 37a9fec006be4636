"""Real ``kubectl exec`` against the test server: kubectl >= 1.30 streams exec over WebSocket
(``v5.channel.k8s.io``) and takes its exit code from the Status on channel 3."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Optional

import pytest

from exec_server import ExecTestServer

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def versioned(version: str) -> Optional[str]:
    """The kubectl.1.NN next to the real kubectl binary, if this machine has it."""
    assert KUBECTL is not None
    path = Path(os.path.realpath(KUBECTL)).parent / f"kubectl.{version}"
    return str(path) if path.exists() else None


@pytest.fixture
def kubectl(exec_server: ExecTestServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    config = tmp_path / "kubeconfig"
    config.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: t, cluster: {{server: "{exec_server.url}"}}}}]
users: [{{name: u, user: {{}}}}]
contexts: [{{name: t, context: {{cluster: t, user: u, namespace: default}}}}]
current-context: t
""")
    base = ["--kubeconfig", str(config), "--cache-dir", str(tmp_path / "cache")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECTL_")}

    def run(*args: str, stdin: Optional[str] = None, binary: Optional[str] = None,
            extra_env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([binary or KUBECTL or "kubectl", *base, *args], capture_output=True, text=True,
                              input=stdin if stdin is not None else "", timeout=60, env={**env, **(extra_env or {})})

    run.base = base  # type: ignore[attr-defined]
    return run


def test_exit_code_and_separate_streams(kubectl, exec_server: ExecTestServer) -> None:  # type: ignore[no-untyped-def]
    r = kubectl("exec", "p", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert r.returncode == 3
    assert r.stdout == "out\n"
    assert r.stderr == "err\ncommand terminated with exit code 3\n"
    assert exec_server.last_result().protocol == "v5.channel.k8s.io"


def test_success_and_env(kubectl) -> None:  # type: ignore[no-untyped-def]
    r = kubectl("exec", "p", "--", "env")
    assert (r.returncode, r.stderr) == (0, "")
    assert "DB_URL=postgres://orders-db:5432/orders\n" in r.stdout


def test_namespace_and_curl_through_the_network(kubectl) -> None:  # type: ignore[no-untyped-def]
    r = kubectl("exec", "-n", "shop", "cart-7d9f8b-x2x", "--", "sh", "-c",
                "curl -s -o /dev/null -w '%{http_code}' http://cart.shop:8080/fail; curl -sf http://cart:8080/fail")
    assert (r.returncode, r.stdout) == (22, "503")


def test_unknown_command_exits_127(kubectl) -> None:  # type: ignore[no-untyped-def]
    r = kubectl("exec", "p", "--", "sh", "-c", "nosuch")
    assert (r.returncode, r.stderr) == (127, "sh: nosuch: not found\ncommand terminated with exit code 127\n")


def test_piped_stdin(kubectl) -> None:  # type: ignore[no-untyped-def]
    r = kubectl("exec", "-i", "p", "--", "sh", stdin="echo hi\nhostname\nexit 5\n")
    assert (r.returncode, r.stdout) == (5, "hi\np\n")
    r = kubectl("exec", "-i", "p", "--", "cat", stdin="piped data\n")
    assert (r.returncode, r.stdout) == (0, "piped data\n")


def test_missing_executable_is_an_internal_error(kubectl) -> None:  # type: ignore[no-untyped-def]
    r = kubectl("exec", "p", "--", "bash")
    assert r.returncode == 1
    assert r.stderr.startswith("error: Internal error occurred: error executing command in container: ")
    assert 'exec: "bash": executable file not found in $PATH: unknown' in r.stderr


def test_container_flag_and_default_container(kubectl, exec_server: ExecTestServer) -> None:  # type: ignore[no-untyped-def]
    r = kubectl("exec", "two", "-c", "sidecar", "--", "hostname")
    assert (r.returncode, r.stdout) == (0, "two\n")
    assert exec_server.last_result().options.container == "sidecar"
    r = kubectl("exec", "two", "--", "true")
    assert r.returncode == 0 and 'Defaulted container "app" out of: app, sidecar' in r.stderr


def test_missing_pod(kubectl) -> None:  # type: ignore[no-untyped-def]
    r = kubectl("exec", "nope", "--", "true")
    assert r.returncode == 1 and 'pods "nope" not found' in r.stderr


def test_interactive_tty(kubectl, exec_server: ExecTestServer) -> None:  # type: ignore[no-untyped-def]
    """``kubectl exec -it p -- sh`` on a real terminal: prompt, echo, line editing, exit code."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([KUBECTL or "kubectl", *kubectl.base, "exec", "-it", "p", "--", "sh"],
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
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
def test_other_kubectl_versions(kubectl, version: str) -> None:  # type: ignore[no-untyped-def]
    binary = versioned(version)
    if binary is None:
        pytest.skip(f"no kubectl.{version} on this machine")
    r = kubectl("exec", "p", "--", "sh", "-c", "echo v; exit 2", binary=binary)
    assert (r.returncode, r.stdout) == (2, "v\n")


def test_spdy_only_kubectl_gets_a_clear_error(kubectl) -> None:  # type: ignore[no-untyped-def]
    binary = versioned("1.29")
    if binary is None:
        pytest.skip("no kubectl.1.29 on this machine")
    r = kubectl("exec", "p", "--", "true", binary=binary)
    assert r.returncode == 1 and "SPDY is not supported" in r.stderr and "Upgrade request required" in r.stderr
    r = kubectl("exec", "p", "--", "sh", "-c", "exit 6", binary=binary,
                extra_env={"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "true"})
    assert r.returncode == 6
