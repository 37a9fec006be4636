"""Throughput of the twin API server: GET one pod through the official ``kubernetes`` client.

    python benchmarks/bench_apiserver.py [--clients 8] [--seconds 5] [--mode procs|threads] [--raw]

The server runs in this process (as it does in a marathon: same process as the simulation);
the clients run elsewhere — ``procs``: one process per client (like agents and kubectl),
``threads``: one client process with N threads sharing one ``ApiClient`` (one connection pool).
Each client calls ``CoreV1Api.read_namespaced_pod`` in a loop over HTTPS with keep-alive;
``--raw`` passes ``_preload_content=False`` (no model deserialisation on the client side, which
is where most client CPU goes). Prints requests per second over the whole run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The populated store and canned telemetry are the API server tests' own fixtures (tests/twin/conftest.py,
# which imports tests/support/): a benchmark script borrows them from the test tree.
sys.path.insert(0, str(ROOT / "tests"))


def _client_loop(kubeconfig: str, threads: int, seconds: float, raw: bool, start_at: float, out: mp.Queue) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)
    api.configuration.connection_pool_maxsize = max(threads, 1)
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = max(threads, 1)
    v1 = client.CoreV1Api(api)
    names = ["web-7d4b9c8f6d-abcde", "web-7d4b9c8f6d-fghij"]
    v1.read_namespaced_pod(names[0], "shop")  # warm up: TLS handshake, connection
    counts = [0] * threads
    while time.time() < start_at:
        time.sleep(0.001)
    stop = time.time() + seconds

    def work(i: int) -> None:
        n = 0
        while time.time() < stop:
            if raw:
                _ = v1.read_namespaced_pod(names[n % 2], "shop", _preload_content=False).data
            else:
                v1.read_namespaced_pod(names[n % 2], "shop")
            n += 1
        counts[i] = n

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put(sum(counts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--mode", choices=("procs", "threads"), default="procs")
    ap.add_argument("--raw", action="store_true", help="skip client-side model deserialisation")
    args = ap.parse_args()

    from support.admission import RecordingAdmission
    from twin.conftest import AGENT_TOKEN, CannedTelemetry, populate

    from pytest_sremarathon.clock import VirtualClock
    from pytest_sremarathon.k8s.store import Store
    from pytest_sremarathon.twin.apiserver import ApiServer

    clock = VirtualClock()
    store = Store(clock=clock)
    populate(store, clock)
    server = ApiServer(store, tokens={AGENT_TOKEN: "agent"}, admission=RecordingAdmission(),
                       telemetry=CannedTelemetry(clock))
    server.start()
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = str(server.write_kubeconfig(Path(tmp) / "kubeconfig", AGENT_TOKEN))
        ctx = mp.get_context("spawn")
        q: mp.Queue = ctx.Queue()
        start_at = time.time() + 3.0
        if args.mode == "procs":
            procs = [ctx.Process(target=_client_loop, args=(kubeconfig, 1, args.seconds, args.raw, start_at, q))
                     for _ in range(args.clients)]
        else:
            procs = [ctx.Process(target=_client_loop,
                                 args=(kubeconfig, args.clients, args.seconds, args.raw, start_at, q))]
        for p in procs:
            p.start()
        while time.time() < start_at:
            time.sleep(0.001)
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        total = sum(q.get() for _ in procs)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        for p in procs:
            p.join()
    server.stop()
    rate = total / args.seconds
    server_cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    print(f"{total} GET pod requests in {args.seconds:.1f}s with {args.clients} clients ({args.mode}"
          f"{', raw' if args.raw else ''}): {rate:,.0f} req/s; server CPU {server_cpu / max(total, 1) * 1e6:.0f} µs "
          f"per request ({server_cpu / args.seconds:.0%} of one core)")


if __name__ == "__main__":
    main()
