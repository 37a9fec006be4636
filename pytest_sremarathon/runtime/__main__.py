"""``python -m pytest_sremarathon.runtime --app shop --service cart``: serve one service.

Where the code comes from, first match wins:

1. ``--artifact DIR`` (or ``$SREMARATHON_ARTIFACT_DIR``, or ``/app`` when it holds an
   ``artifact.json``: the image built by the pipeline) — checked against its digest;
2. ``--datastore [IMAGE]`` — the built-in key-value datastore;
3. ``--apps-dir DIR`` (or ``$SREMARATHON_APPS_DIR``) — built from ``DIR/<app>`` like the
   pipeline's build step (a service declared ``datastore:`` in app.yaml serves the datastore).

Configuration is the process environment (what ``envFrom: configMapRef`` gives a container),
on top of ``--config FILE`` (a ``config/<service>.yaml`` mapping). Addressing:
``$SREMARATHON_SERVICE_ADDRS`` (JSON ``{"service": "host:port"}``, replaces DNS),
``$SREMARATHON_SERVICE_PORTS`` (JSON ``{"service": port}``; default 8080),
``$SREMARATHON_EXTERNALS`` (JSON ``{"name": {"host", "latency_ms"}}``); identity from
``$POD_NAME``, ``$POD_NAMESPACE``, ``$NODE_NAME``, ``$SREMARATHON_ZONE``; requests served at a
time from ``--concurrency`` / ``$SREMARATHON_CONCURRENCY`` (default 1).

Exit status: 0 after SIGTERM/SIGINT, 1 when the code crashes on start (traceback on stderr),
2 for a usage or artifact error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any, Optional

from .artifacts import MANIFEST, ArtifactError, datastore, read_artifact
from .code import Artifact
from .metrics import Registry
from .router import HttpRouter
from .server import Crash, LogSink, ServiceServer

DEFAULT_ARTIFACT_DIR = Path("/app")
DEFAULT_DATASTORE_IMAGE = "sremarathon/datastore"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_sremarathon.runtime",
                                description="Serve one application service (or datastore) over HTTP.")
    app, service = os.environ.get("SREMARATHON_APP"), os.environ.get("SREMARATHON_SERVICE")
    p.add_argument("--app", required=not app, default=app, help="application name (e.g. shop; $SREMARATHON_APP)")
    p.add_argument("--service", required=not service, default=service,
                   help="service name (e.g. cart; $SREMARATHON_SERVICE)")
    p.add_argument("--namespace", default=None, help="Kubernetes namespace (default: $POD_NAMESPACE or the app)")
    p.add_argument("--artifact", type=Path, default=None, help="artifact directory (default: /app in the image)")
    p.add_argument("--apps-dir", type=Path, default=None, help="build the service from DIR/<app> instead")
    p.add_argument("--datastore", nargs="?", const=DEFAULT_DATASTORE_IMAGE, default=None, metavar="IMAGE",
                   help="serve the built-in key-value datastore (IMAGE names the store it stands for)")
    p.add_argument("--bind", default=os.environ.get("SREMARATHON_BIND", "0.0.0.0"), help="address to listen on")
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")), help="port (0: any free port)")
    p.add_argument("--config", type=Path, default=None, help="configuration file (YAML mapping)")
    p.add_argument("--concurrency", type=int, default=int(os.environ.get("SREMARATHON_CONCURRENCY", "1")),
                   help="requests handled at a time (default 1, as a pod of the twin; others queue)")
    return p


def _json_env(name: str) -> Optional[Any]:
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ArtifactError(f"${name} is not valid JSON: {raw[:80]!r}") from None


def load_config(path: Optional[Path]) -> dict[str, str]:
    """The file (if any) under the environment: env wins, as with envFrom and env together."""
    data: dict[str, str] = {}
    if path is not None:
        import yaml

        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ArtifactError(f"--config {path}: {exc}") from None
        if not isinstance(loaded, dict):
            raise ArtifactError(f"--config {path}: expected a mapping of KEY: value")
        data.update({str(k): str(v) for k, v in loaded.items()})
    data.update(os.environ)
    return data


def _from_source(apps_dir: Path, app_name: str, service: str) -> tuple[Artifact, dict[str, dict[str, Any]]]:
    from ..apps import load_app
    from .artifacts import package

    app = load_app(apps_dir / app_name)
    spec = app.services.get(service)
    if spec is None:
        raise ArtifactError(f"{apps_dir / app_name}/app.yaml: no service {service!r}; services: "
                            f"{', '.join(app.services)}")
    externals = {n: {"host": e.host, "latency_ms": e.latency_ms} for n, e in app.externals.items()}
    if spec.datastore:
        return datastore(app.namespace, service, spec.datastore), externals
    root = apps_dir / app_name
    files = {str(p.relative_to(root)): p.read_text() for p in sorted((root / "services").glob("*.py"))}
    return package(app, files)[service], externals


def resolve_artifact(args: argparse.Namespace) -> tuple[Artifact, dict[str, dict[str, Any]]]:
    externals: dict[str, dict[str, Any]] = _json_env("SREMARATHON_EXTERNALS") or {}
    artifact_dir = args.artifact or (Path(os.environ["SREMARATHON_ARTIFACT_DIR"])
                                     if os.environ.get("SREMARATHON_ARTIFACT_DIR") else None)
    if artifact_dir is None and args.datastore is None and args.apps_dir is None \
            and (DEFAULT_ARTIFACT_DIR / MANIFEST).exists():
        artifact_dir = DEFAULT_ARTIFACT_DIR
    if artifact_dir is not None:
        artifact = read_artifact(artifact_dir)
        if (artifact.app, artifact.service) != (args.app, args.service):
            raise ArtifactError(f"{artifact_dir} holds {artifact.app}/{artifact.service}, not {args.app}/{args.service}")
        return artifact, externals
    if args.datastore is not None:
        return datastore(args.app, args.service, args.datastore), externals
    apps_dir = args.apps_dir or (Path(os.environ["SREMARATHON_APPS_DIR"])
                                 if os.environ.get("SREMARATHON_APPS_DIR") else None)
    if apps_dir is None:
        raise ArtifactError("no code to serve: give --artifact DIR (what the image carries), --apps-dir DIR "
                            "(build from source) or --datastore")
    artifact, from_app = _from_source(apps_dir, args.app, args.service)
    return artifact, {**from_app, **externals}


def build_server(args: argparse.Namespace) -> ServiceServer:
    artifact, externals = resolve_artifact(args)
    namespace = args.namespace or os.environ.get("POD_NAMESPACE") or args.app
    down = set(filter(None, os.environ.get("SREMARATHON_EXTERNALS_DOWN", "").split(",")))
    for name in down & set(externals):
        externals[name] = {**externals[name], "down": True}
    registry = Registry(artifact.app, artifact.service, artifact.digest)
    router = HttpRouter(namespace=namespace, registry=registry, addrs=_json_env("SREMARATHON_SERVICE_ADDRS"),
                        ports={k: int(v) for k, v in (_json_env("SREMARATHON_SERVICE_PORTS") or {}).items()},
                        externals=externals,
                        domain=os.environ.get("SREMARATHON_CLUSTER_DOMAIN", "svc.cluster.local"))
    return ServiceServer(artifact, namespace=namespace, config=load_config(args.config), router=router,
                         registry=registry, bind=args.bind, port=args.port,
                         pod=os.environ.get("POD_NAME") or socket.gethostname(),
                         node=os.environ.get("NODE_NAME", ""), zone=os.environ.get("SREMARATHON_ZONE", ""),
                         log=LogSink(sys.stderr), concurrency=args.concurrency)


def main(argv: Optional[list[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        server = build_server(args)
    except ArtifactError as exc:
        print(f"sremarathon-runtime: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a broken app.yaml etc.: one line, not a traceback
        print(f"sremarathon-runtime: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2

    stopping = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        server.start()
    except Crash:
        return 1
    except OSError as exc:  # the port is taken, …
        print(f"sremarathon-runtime: cannot listen on {args.bind}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    stopping.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
