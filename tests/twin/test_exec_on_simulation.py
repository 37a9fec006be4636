"""``kubectl exec``, ``kubectl attach`` and debug pods against the whole twin: the built-in apps
deployed through their pipelines, real kubectl (and the official Python client) over the
twin's TLS port, every exec through the policy point. The container's environment comes from
its manifest and ConfigMaps, its files from its volumes, and its network is the twin's: the
apps' real handlers answer, partitions, DNS outages and added latency apply."""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from support.admission import RecordingAdmission
from support.kubectl import Kubectl, find_kubectl, kubectl_for
from support.twins import BackendTwin

from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.policy import Policy
from pytest_sremarathon.scenario import load_scenario
from pytest_sremarathon.twin.containers import REDACTED

AGENT = "exec-agent-token"
OPERATOR = "exec-operator-token"
KUBECTL = find_kubectl()
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


class TtyKubectl(Kubectl):
    def tty(self, *args: str, steps: list[tuple[bytes, Optional[bytes]]], timeout: float = 20) -> tuple[int, bytes]:
        """Run kubectl on a pseudo-terminal: wait for each token, then type its keys."""
        master, slave = pty.openpty()
        proc = subprocess.Popen(self.argv(*args), stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                                env=self.environ())
        os.close(slave)
        seen = b""

        def read(until: Optional[bytes], limit: float) -> None:
            nonlocal seen
            deadline = time.monotonic() + limit
            while (until is None or until not in seen) and time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.1)
                if ready:
                    try:
                        chunk = os.read(master, 4096)
                    except OSError:
                        return
                    if not chunk:
                        return
                    seen += chunk
                elif until is None:
                    return
        try:
            for token, keys in steps:
                read(token, timeout)
                assert token in seen, f"{token!r} never came:\n{seen.decode(errors='replace')}"
                if keys is not None:
                    os.write(master, keys)
            code = proc.wait(timeout)
            read(None, 0.5)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
        return code, seen


class Sim(BackendTwin):
    """The smoke scenario's apps on the twin backend, three virtual minutes in, with an agent's
    and an operator's kubeconfig."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(load_scenario(SCENARIOS_DIR / "smoke.yaml"), tmp, admission=RecordingAdmission(),
                         tokens={AGENT: "agent", OPERATOR: "operator"})
        self.agent_kubeconfig = self.backend.server.write_kubeconfig(tmp / "agent.kubeconfig", AGENT)
        self.operator_kubeconfig = self.backend.server.write_kubeconfig(tmp / "operator.kubeconfig", OPERATOR)
        self.network = self.cluster.network
        self.run(180)

    def running(self, app: str, ns: str = "shop") -> list[dict[str, Any]]:
        return [p for p in self.pods(app, ns) if p["status"].get("phase") == "Running"]

    def pod(self, name: str, ns: str = "default") -> dict[str, Any]:
        pod = self.store.get("Pod", ns, name)
        assert pod is not None, f"no pod {ns}/{name}"
        return pod

    def cluster_ip(self, service: str, ns: str = "shop") -> str:
        svc = self.store.get("Service", ns, service)
        assert svc is not None
        return str(svc["spec"]["clusterIP"])

    def gone(self, name: str, ns: str = "default") -> bool:
        return self.store.get("Pod", ns, name) is None

    def zone_of(self, pod: dict[str, Any]) -> str:
        return self.network.node_zone[pod["spec"]["nodeName"]]

    def records(self, verb: str) -> list[Any]:
        return [(r, d, s) for r, d, s in self.admission.records if r.verb == verb]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    s = Sim(tmp_path_factory.mktemp("exec-sim"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def kc(sim: Sim, tmp_path_factory: pytest.TempPathFactory) -> TtyKubectl:
    assert KUBECTL is not None
    return TtyKubectl(KUBECTL, sim.agent_kubeconfig, tmp_path_factory.mktemp("kube-cache"))


@pytest.fixture(scope="module")
def operator(sim: Sim, kc: TtyKubectl) -> TtyKubectl:
    return TtyKubectl(kc.binary, sim.operator_kubeconfig, kc.cache_dir)


def debug_pod(kc: Kubectl, name: str, image: str = "busybox", **spec: Any) -> None:
    """A long-running debug pod (``sleep infinity``): it starts as soon as it is created."""
    container = {"name": name, "image": image, "command": ["sleep", "infinity"], **spec.pop("container", {})}
    kc("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                             "spec": {"containers": [container], **spec}}))


# -- the container an exec runs in -----------------------------------------------------------------

def test_env_is_the_manifests_and_configmaps_with_secrets_redacted_for_the_agent(sim: Sim, kc: TtyKubectl,
                                                                                  operator: TtyKubectl) -> None:
    cart = sim.running("cart")[0]["metadata"]["name"]
    out = kc("exec", "-n", "shop", cart, "--", "sh", "-c", "env | grep -E '^(CART|REQUEST|LOG|HOSTNAME|HOME|PATH)'")
    lines = out.splitlines()
    assert "CART_CACHE_ADDR=cart-cache" in lines and "REQUEST_TIMEOUT_MS=300" in lines  # envFrom: cart-config
    assert f"HOSTNAME={cart}" in lines and "HOME=/" in lines  # user 65532 has no passwd entry
    cart_ip = sim.cluster_ip("cart")
    assert f"CART_SERVICE_HOST={cart_ip}" in lines and f"CART_PORT_8080_TCP=tcp://{cart_ip}:8080" in lines
    assert f"CART_CACHE_PASSWORD={REDACTED}" in lines  # secretKeyRef: the agent may not read Secrets
    assert lines[0].startswith("PATH=")
    # the operator (no policy on reads) sees the value the container was started with
    shown = operator("exec", "-n", "shop", cart, "--", "printenv", "CART_CACHE_PASSWORD")
    assert shown == "c4rt-cache-2026-spring\n"
    # the Deployment resolves to a pod, as kubectl does it (GET deployment, list pods)
    assert kc("exec", "-n", "shop", "deploy/cart", "--", "printenv", "LOG_LEVEL") == "info\n"


def test_files_configmap_and_secret_volumes_and_the_image(sim: Sim, kc: TtyKubectl, operator: TtyKubectl) -> None:
    kc("create", "configmap", "dbg-config", "--from-literal=app.yaml=port: 8080\nlog_level: debug\n",
       "--from-literal=FEATURE=on")
    operator("create", "secret", "generic", "dbg-secret", "--from-literal=password=hunter2")
    debug_pod(kc, "files", container={
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "GREETING", "value": "level $(CFG_FEATURE)"}],
        "envFrom": [{"configMapRef": {"name": "dbg-config"}, "prefix": "CFG_"}],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/config"}, {"name": "sec", "mountPath": "/etc/secret"},
                         {"name": "one", "mountPath": "/etc/app.yaml", "subPath": "app.yaml"}]},
        volumes=[{"name": "cfg", "configMap": {"name": "dbg-config"}},
                 {"name": "sec", "secret": {"secretName": "dbg-secret"}},
                 {"name": "one", "configMap": {"name": "dbg-config", "items": [{"key": "app.yaml",
                                                                               "path": "app.yaml"}]}}])
    assert kc("exec", "files", "--", "ls", "/etc/config") == "FEATURE\napp.yaml\n"
    assert kc("exec", "files", "--", "cat", "/etc/config/app.yaml") == "port: 8080\nlog_level: debug\n"
    assert kc("exec", "files", "--", "cat", "/etc/app.yaml") == "port: 8080\nlog_level: debug\n"
    assert kc("exec", "files", "--", "cat", "/etc/secret/password") == REDACTED + "\n"
    assert operator("exec", "files", "--", "cat", "/etc/secret/password") == "hunter2"
    ip = sim.pod("files")["status"]["podIP"]
    env = kc("exec", "files", "--", "env").splitlines()
    assert f"POD_IP={ip}" in env and "GREETING=level on" in env and "CFG_FEATURE=on" in env
    assert kc("exec", "files", "--", "cat", "/etc/resolv.conf") == (
        "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n")
    assert f"{ip}\tfiles\n" in kc("exec", "files", "--", "cat", "/etc/hosts")
    assert kc("exec", "files", "--", "hostname") == "files\n"
    ps = kc("exec", "files", "--", "ps").splitlines()
    assert ps[0].split() == ["PID", "USER", "TIME", "COMMAND"] and ps[1].split()[-2:] == ["sleep", "infinity"]
    # the app's image: python:3.11-slim with its artifact at /app, no ps, no wget
    cart = sim.running("cart")[0]["metadata"]["name"]
    # the service, the app library and the vendored library the cart imports
    assert "cart.py\nlib.py\nmoneyparse.py\n" == kc("exec", "-n", "shop", cart, "--", "ls", "/app/services")
    assert 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"' in kc("exec", "-n", "shop", cart, "--", "cat",
                                                                  "/etc/os-release")
    assert kc("exec", "-n", "shop", cart, "--", "sh", "-c", "id -u; pwd") == "65532\n/app\n"
    missing = kc.run("exec", "-n", "shop", cart, "--", "wget", "-qO-", "http://cart:8080/healthz", check=False)
    assert missing.returncode == 1 and 'exec: "wget": executable file not found in $PATH' in missing.stderr


def test_exit_codes_and_errors_reach_kubectl(sim: Sim, kc: TtyKubectl) -> None:
    cart = sim.running("cart")[0]["metadata"]["name"]
    r = kc.run("exec", "-n", "shop", cart, "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\ncommand terminated with exit code 3\n")
    r = kc.run("exec", "-n", "shop", cart, "--", "sh", "-c", "nosuch", check=False)
    assert r.returncode == 127 and "sh: nosuch: not found" in r.stderr
    r = kc.run("exec", "-n", "shop", "nope", "--", "true", check=False)
    assert r.returncode == 1 and 'pods "nope" not found' in r.stderr
    r = kc.run("exec", "-n", "shop", cart, "-c", "sidecar", "--", "true", check=False)
    assert r.returncode == 1 and f"container sidecar is not valid for pod {cart}" in r.stderr


def test_what_the_container_cannot_do_comes_after_the_upgrade(sim: Sim, kc: TtyKubectl) -> None:
    kc("run", "crashing", "--image=busybox", "--", "sh", "-c", "exit 1")  # restartPolicy Always
    waiting = sim.pod("crashing")["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "CrashLoopBackOff"
    r = kc.run("exec", "crashing", "--", "true", check=False)
    assert r.returncode == 1 and r.stderr == ('error: Internal error occurred: unable to upgrade connection: '
                                              'container not found ("crashing")\n')
    debug_pod(kc, "lonely")
    node = sim.pod("lonely")["spec"]["nodeName"]
    sim.network.node_up[node] = False
    try:
        r = kc.run("exec", "lonely", "--", "true", check=False)
        assert r.returncode == 1 and "error dialing backend: dial tcp 172.18." in r.stderr and ":10250: i/o timeout" \
            in r.stderr
    finally:
        sim.network.node_up[node] = True


def test_interactive_tty(sim: Sim, kc: TtyKubectl) -> None:
    cart = sim.running("cart")[0]["metadata"]["name"]
    code, seen = kc.tty("exec", "-it", "-n", "shop", cart, "--", "sh", steps=[
        (b"/app $ ", b"echo hi $((2*3))\r"), (b"hi 6", b"printenv LOG_LEVEL\r"), (b"info", b"exit 4\r"),
        (b"exit code 4", None)])
    assert code == 4 and b"/app $ echo hi $((2*3))\r\nhi 6\r\n" in seen


# -- the network -------------------------------------------------------------------------------------

def test_wget_and_curl_reach_the_real_handlers(sim: Sim, kc: TtyKubectl) -> None:
    debug_pod(kc, "net", image="nicolaka/netshoot")
    assert kc("exec", "net", "--", "wget", "-qO-", "http://cart.shop:8080/healthz") == "ok"
    about = json.loads(kc("exec", "net", "--", "wget", "-qO-", "http://cart.shop.svc.cluster.local:8080/"))
    assert about["service"] == "cart" and "get_cart" in about["endpoints"]
    body = kc("exec", "net", "--", "curl", "-s", "-X", "POST", "-d", '{"user": "u-exec"}',
              "http://cart.shop:8080/add_item")
    assert json.loads(body) == {"error": "Internal Server Error", "origin": "service:shop/cart"}  # no product
    kc("exec", "net", "--", "curl", "-sf", "-X", "POST", "-d", '{"user": "u-exec", "product": "OLJCESPC7Z", "quantity": 2}',
       "http://cart.shop:8080/add_item")
    cart = json.loads(kc("exec", "net", "--", "curl", "-s", "-X", "POST", "-d", '{"user": "u-exec"}',
                         "http://cart.shop:8080/get_cart"))
    assert cart["items"] and cart["items"][0]["product"] == "OLJCESPC7Z"  # through cart-cache, the datastore
    logs = kc("logs", "-n", "shop", "-l", "app=cart", "--tail", "200")
    assert "ERROR add_item failed" in logs and "KeyError: 'product'" in logs  # the handler's own traceback
    out = kc("exec", "net", "--", "sh", "-c",
             "nc -z cart-cache.shop 6379; echo $?; nc -z -w 1 cart.shop 9999; echo $?; getent hosts cart.shop; "
             "nslookup nope.shop >/dev/null; echo $?; curl -s http://cart.shop:8081/; echo $?")
    ip = sim.cluster_ip("cart")
    assert out.splitlines() == ["0", "1", f"{ip}      cart.shop", "1", "28"]


def test_the_monitoring_namespaces_prometheus_answers_from_inside(sim: Sim, kc: TtyKubectl) -> None:
    r = kc.run("run", "promq", "--rm", "-i", "--restart=Never", "--image=curlimages/curl", "--", "-s",
               "http://prometheus.monitoring:9090/api/v1/query?query=up")
    answer = json.loads(r.stdout[:r.stdout.rindex("}") + 1])
    assert answer["status"] == "success" and {m["metric"]["job"] for m in answer["data"]["result"]} >= {"cart"}


def test_partitions_dns_outages_and_latency_apply(sim: Sim, kc: TtyKubectl) -> None:
    debug_pod(kc, "probe")
    here = sim.zone_of(sim.pod("probe"))
    there = next(p for p in sim.running("cart") if sim.zone_of(p) != here)
    url = f"http://{there['status']['podIP']}:8080/healthz"
    assert kc("exec", "probe", "--", "wget", "-qO-", url) == "ok"
    sim.network.partitions.add(frozenset((here, sim.zone_of(there))))
    try:
        r = kc.run("exec", "probe", "--", "wget", "-T", "2", "-qO-", url, check=False)
        assert r.returncode == 1 and "download timed out" in r.stderr
    finally:
        sim.network.partitions.clear()
    sim.network.dns_broken_zones.add(here)
    try:
        r = kc.run("exec", "probe", "--", "sh", "-c", "wget -qO- http://cart.shop:8080/healthz; echo rc=$?; "
                   f"nslookup cart.shop; wget -qO- {url}", check=False)
        assert r.stdout.splitlines()[0] == "rc=1" and "bad address 'cart.shop'" in r.stderr
        assert ";; connection timed out; no servers could be reached" in r.stdout and r.stdout.endswith("ok")
    finally:
        sim.network.dns_broken_zones.clear()
    uid = there["metadata"]["uid"]
    sim.network.pod_delay_ms[uid] = 3000.0
    try:
        r = kc.run("exec", "probe", "--", "wget", "-T", "1", "-qO-", url, check=False)
        assert r.returncode == 1 and "download timed out" in r.stderr
    finally:
        sim.network.pod_delay_ms.pop(uid)


# -- debug pods of utility images ----------------------------------------------------------------------

def test_kubectl_run_rm_i_busybox_prints_the_answer_and_the_pod_goes(sim: Sim, kc: TtyKubectl) -> None:
    r = kc.run("run", "tmp", "--rm", "-i", "--restart=Never", "--image=busybox", "--",
               "wget", "-qO-", "http://cart.shop:8080/healthz")
    assert r.returncode == 0 and r.stdout.startswith("ok") and 'pod "tmp" deleted' in r.stdout
    assert sim.gone("tmp")
    attach = sim.records("attach")[-1]
    assert attach[0].target == "kube/default/pods/tmp/attach" and attach[2] == 101
    # a failing command: kubectl reports the container's exit code, read from the pod
    r = kc.run("run", "tmp", "--rm", "-i", "--restart=Never", "--image=curlimages/curl", "--",
               "-sS", "http://nope.shop:8080/", check=False)
    assert r.returncode == 6 and "curl: (6) Could not resolve host: nope.shop" in r.stdout + r.stderr
    assert sim.gone("tmp")


def test_kubectl_run_it_gives_a_shell(sim: Sim, kc: TtyKubectl) -> None:
    code, seen = kc.tty("run", "shell", "-it", "--rm", "--restart=Never", "--image=alpine", steps=[
        (b"/ # ", b"wget -qO- http://cart.shop:8080/healthz; echo\r"), (b"ok\r\n", b"exit\r"), (b"deleted", None)])
    assert code == 0 and b"/ # wget -qO- http://cart.shop:8080/healthz; echo\r\nok\r\n" in seen
    assert sim.gone("shell")


def test_a_utility_pod_runs_its_command_completes_and_logs(sim: Sim, kc: TtyKubectl) -> None:
    kc("run", "once", "--restart=Never", "--image=busybox", "--", "sh", "-c",
       "echo hello; wget -qO- http://cart.shop:8080/readyz; echo; exit 2")
    pod = sim.pod("once")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 2
    assert kc("logs", "once") == "hello\nok\n"
    assert "Error" in kc("get", "pod", "once")
    kc("run", "fine", "--restart=Never", "--image=alpine", "--", "true")
    assert "Completed" in kc("get", "pod", "fine") and sim.pod("fine")["status"]["phase"] == "Succeeded"
    # an image nobody built and no utility: it fails to pull, as before
    kc("run", "other", "--restart=Never", "--image=example.com/team/tool:1.0")
    sim.run(30)
    waiting = sim.pod("other")["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] in ("ErrImagePull", "ImagePullBackOff")


def test_nginx_serves_its_default_page(sim: Sim, kc: TtyKubectl) -> None:
    kc("run", "web", "--image=nginx", "--port=80", "--expose")
    sim.run(30)  # the Endpoints controller picks the pod up
    debug_pod(kc, "browser", image="curlimages/curl")
    page = kc("exec", "browser", "--", "curl", "-s", "http://web/")
    assert "<title>Welcome to nginx!</title>" in page
    head = kc("exec", "browser", "--", "curl", "-sI", "http://web.default.svc.cluster.local/nope")
    assert head.startswith("HTTP/1.1 404 Not Found") and "Server: nginx/" in head
    logs = kc("logs", "web")
    assert "Configuration complete; ready for start up" in logs and '"GET / HTTP/1.1" 200 615 "-" "curl/' in logs


# -- the policy point ------------------------------------------------------------------------------------

def test_exec_into_a_protected_namespace_is_denied_and_recorded(sim: Sim, kc: TtyKubectl, operator: TtyKubectl) -> None:
    operator("run", "sys", "-n", "kube-system", "--image=busybox", "--", "sleep", "3600")
    r = kc.run("exec", "-n", "kube-system", "sys", "--", "cat", "/etc/hostname", check=False)
    assert r.returncode == 1 and "denied by sremarathon policy rule 'protected-namespaces'" in r.stderr
    req, decision, status = sim.records("exec")[-1]
    assert (status, decision.rule, req.target) == (403, "protected-namespaces", "kube/kube-system/pods/sys/exec")
    assert req.body["command"] == ["cat", "/etc/hostname"]
    assert operator("exec", "-n", "kube-system", "sys", "--", "hostname") == "sys\n"  # the operator may
    # the opt-in rule no-exec forbids every exec of the agent
    saved = sim.admission.policy
    sim.admission.policy = Policy(rules=saved.rules + ("no-exec",))
    try:
        cart = sim.running("cart")[0]["metadata"]["name"]
        r = kc.run("exec", "-n", "shop", cart, "--", "true", check=False)
        assert r.returncode == 1 and "denied by sremarathon policy rule 'no-exec'" in r.stderr
    finally:
        sim.admission.policy = saved
    kc.run("exec", "-n", "shop", cart, "--", "true")
    kc.run("exec", "-n", "shop", cart, "-c", "sidecar", "--", "true", check=False)
    # allowed ones are recorded with their outcome: 101 (upgraded), or the check that failed (-c sidecar)
    statuses = {(req.name, s) for req, d, s in sim.records("exec") if d.allowed and req.namespace == "shop"}
    assert (cart, 101) in statuses and (cart, 400) in statuses


def test_port_forward_says_what_to_do_instead(sim: Sim, kc: TtyKubectl) -> None:
    cart = sim.running("cart")[0]["metadata"]["name"]
    r = kc.run("port-forward", "-n", "shop", cart, "18080:8080", check=False)
    assert r.returncode == 1 and "pods/portforward is not supported by the sremarathon twin" in r.stderr
    assert "kubectl run tmp --rm -i --restart=Never --image=busybox" in r.stderr


# -- the official Python client ------------------------------------------------------------------------

def test_python_client_stream(sim: Sim) -> None:
    from kubernetes import client, config
    from kubernetes.stream import stream

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(sim.agent_kubeconfig)))
    cart = sim.running("cart")[0]["metadata"]["name"]
    resp = stream(api.connect_get_namespaced_pod_exec, cart, "shop", command=["sh", "-c", "echo hi; echo no >&2; exit 5"],
                  stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    resp.run_forever(timeout=20)
    assert (resp.returncode, resp.read_stdout(), resp.read_stderr()) == (5, "hi\n", "no\n")
    out = stream(api.connect_get_namespaced_pod_exec, cart, "shop", command=["printenv", "REQUEST_TIMEOUT_MS"],
                 stderr=True, stdin=False, stdout=True, tty=False)
    assert out == "300\n"
    resp = stream(api.connect_get_namespaced_pod_exec, cart, "shop", command=["sh"], stderr=True, stdin=True,
                  stdout=True, tty=False, _preload_content=False)
    resp.write_stdin("hostname\n")
    seen = ""
    deadline = time.monotonic() + 20
    while cart not in seen and time.monotonic() < deadline:
        resp.update(timeout=1)
        seen += resp.read_stdout() if resp.peek_stdout() else ""
    resp.write_stdin("exit 7\n")
    resp.run_forever(timeout=20)
    assert seen == f"{cart}\n" and resp.returncode == 7


KR8S_SCRIPT = """
import json, sys
import kr8s
api = kr8s.api(kubeconfig=sys.argv[1])
pod = kr8s.objects.Pod.get(sys.argv[2], namespace="shop", api=api)
out = []
for cmd in (["sh", "-c", "echo out; echo err >&2; exit 3"], ["printenv", "REQUEST_TIMEOUT_MS"]):
    ex = pod.exec(cmd, check=False)
    out.append([ex.returncode, ex.stdout.decode(), ex.stderr.decode()])
print(json.dumps(out))
"""


def test_kr8s_pod_exec(sim: Sim, tmp_path: Path) -> None:
    """kr8s (v4.channel.k8s.io through httpx-ws), when importable or in ``SREMARATHON_KR8S_PATH``
    (a ``pip install --target`` of it, run in a process of its own, as tests/exec/test_kr8s.py)."""
    path = os.environ.get("SREMARATHON_KR8S_PATH", "")
    if not path:
        if importlib.util.find_spec("kr8s") is None:
            pytest.skip("kr8s is not installed (set SREMARATHON_KR8S_PATH to a pip --target directory of it)")
        path = os.pathsep.join(p for p in sys.path if p)
    cart = sim.running("cart")[0]["metadata"]["name"]
    r = subprocess.run([sys.executable, "-c", KR8S_SCRIPT, str(sim.agent_kubeconfig), cart], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": path}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [[3, "out\n", "err\n"], [0, "300\n", ""]]


@pytest.mark.parametrize("version", ["1.30", "1.31", "1.33"])
def test_other_kubectl_versions(sim: Sim, kc: TtyKubectl, version: str) -> None:
    other = kubectl_for(sim.agent_kubeconfig, kc.cache_dir.parent / f"cache-{version}", version)
    cart = sim.running("cart")[0]["metadata"]["name"]
    r = other.run("exec", "-n", "shop", cart, "--", "sh", "-c", "hostname; exit 2", check=False)
    assert (r.returncode, r.stdout) == (2, f"{cart}\n")
    r = other.run("run", f"v{version.replace('.', '')}", "--rm", "-i", "--restart=Never", "--image=busybox", "--",
                  "wget", "-qO-", "http://cart.shop:8080/healthz")
    assert r.stdout.startswith("ok")
