"""The API server under concurrent load: every answer stays correct.

Eight clients (six doing list/get/patch with read-your-writes checks, two watching) run for
SREMARATHON_LOAD_SECONDS (default 60) against one twin. Throughput is measured by
benchmarks/bench_apiserver.py, not here.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from kubernetes import client as k8s
from kubernetes import config, watch

SECONDS = float(os.environ.get("SREMARATHON_LOAD_SECONDS", "60"))
WORKERS, WATCHERS = 6, 2


def test_eight_concurrent_clients_get_correct_answers_throughout(twin: Any) -> None:
    ns = twin.ns
    expected_pods = {p["metadata"]["name"] for p in twin.store.list("Pod", ns)}
    setup = k8s.CoreV1Api(twin.operator_client())
    for i in range(WORKERS):
        setup.create_namespaced_config_map(ns, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=f"load-{i}"),
                                                                data={"n": "0"}))
    errors: list[str] = []
    ops = [0] * WORKERS
    seen: list[dict[str, int]] = [{} for _ in range(WATCHERS)]
    stop = time.monotonic() + SECONDS

    def worker(i: int) -> None:
        api = k8s.CoreV1Api(config.new_client_from_config(config_file=str(twin.operator_kubeconfig)))
        n = 0
        try:
            while time.monotonic() < stop:
                names = {p.metadata.name for p in api.list_namespaced_pod(ns).items}
                if names != expected_pods:
                    errors.append(f"list: {sorted(names)}")
                name = sorted(expected_pods)[n % len(expected_pods)]
                if api.read_namespaced_pod(name, ns).metadata.name != name:
                    errors.append(f"get {name}")
                n += 1
                api.patch_namespaced_config_map(f"load-{i}", ns, {"data": {"n": str(n)}})
                got = api.read_namespaced_config_map(f"load-{i}", ns).data["n"]
                if got != str(n):
                    errors.append(f"read-your-write load-{i}: wrote {n}, read {got}")
                ops[i] += 4
        except Exception as exc:  # noqa: BLE001 - any failure is a wrong answer
            errors.append(f"worker {i}: {type(exc).__name__}: {exc}")

    def watcher(j: int) -> None:
        api = k8s.CoreV1Api(config.new_client_from_config(config_file=str(twin.operator_kubeconfig)))
        rv = api.list_namespaced_config_map(ns).metadata.resource_version
        try:
            while time.monotonic() < stop:
                for ev in watch.Watch().stream(api.list_namespaced_config_map, ns, resource_version=rv,
                                               timeout_seconds=5):
                    obj = ev["object"]
                    rv = obj.metadata.resource_version
                    name = obj.metadata.name
                    if name.startswith("load-") and ev["type"] == "MODIFIED":
                        n = int(obj.data["n"])
                        if n <= seen[j].get(name, 0):
                            errors.append(f"watch {j}: {name} went from {seen[j][name]} to {n}")
                        seen[j][name] = n
                    if time.monotonic() >= stop:
                        break
        except Exception as exc:  # noqa: BLE001
            errors.append(f"watcher {j}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)] + \
        [threading.Thread(target=watcher, args=(j,)) for j in range(WATCHERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=SECONDS + 60)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert errors == []
    assert all(n > 0 for n in ops)
    final = {f"load-{i}": int(setup.read_namespaced_config_map(f"load-{i}", ns).data["n"]) for i in range(WORKERS)}
    for j in range(WATCHERS):
        assert seen[j], f"watcher {j} saw no change"
        assert all(seen[j][k] <= final[k] for k in seen[j])
