"""The agent's own process: ``python -m pytest_sremarathon.agent.worker``.

Started by :class:`~pytest_sremarathon.agent_host.AgentHost`, never by users.

Framing (shared by this worker and ``--agent-cmd`` programs)
------------------------------------------------------------
Both directions carry **one JSON object per line** (UTF-8, ``\\n``-terminated, nothing else)
on the process's stdin (host → agent) and stdout (agent → host). Every request carries an
``id``; the answer to a ``setup`` or ``step`` is exactly one line::

    host → agent   {"op": "setup", "id": 1, "env": EnvironmentWire, "agent": "pkg.mod:Class"}
                   {"op": "step",  "id": 2, "obs": ObservationWire}
                   {"op": "close", "id": 3}                  (no answer; stdin closes next)
    agent → host   {"ok": true,  "id": 2, "report": Report}  (a setup answer has no report)
                   {"ok": false, "id": 2, "kind": "error" | "invalid" | "load",
                    "error": "<one line>", "traceback": "..."}

``agent`` is only sent to this worker. An ``--agent-cmd`` program sees the same requests and
may answer a step with a bare ``Report`` object (``{"findings": [...], "claims": [...]}``)
and a setup with any JSON object (``{}`` will do); echoing ``id`` is optional but lets the
host drop stale lines. Its stderr is the agent's log; it must not print anything else on
stdout. The token for the pipeline/telemetry endpoints is in ``env`` — never on argv or in the
environment.

This worker keeps the protocol safe from the agent's own prints: before importing the agent
it moves the protocol onto private descriptors, points fd 0 at ``/dev/null`` and fd 1 (and
``sys.stdout``) at stderr.

Sandbox prelude
---------------
With ``--sandbox`` (only inside fresh mount + PID namespaces, see ``host.py``) the worker first
mounts an empty read-only tmpfs over every ``--hide`` directory (``/dev/null`` over files),
bind-mounts ``--keep`` paths that live under a hidden one back into place, makes the whole
mount tree read-only except ``--writable`` paths and a fresh ``/dev/shm``, then drops every
capability and sets no-new-privs so the agent cannot undo any of it. Any failure of the hiding
step is fatal (exit 70): the agent never runs unhidden. ``--exec CMD ...`` then replaces the
process with an ``--agent-cmd`` program (or a per-step ``--agent-exec`` command); ``--probe``
reports what worked as JSON and exits. ``--rlimit DATA=N`` / ``FSIZE=N`` set the agent's
resource limits first (with or without ``--sandbox``).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import traceback
from typing import Any, Optional

EXIT_SANDBOX_FAILED = 70
EXIT_EXEC_FAILED = 127
MAX_TRACEBACK = 20000

# --- sandbox prelude (runs before anything of the agent is imported) ------------------------

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
SYS_MOUNT_SETATTR = 442  # same number on every architecture (unified syscall table)
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 24, 28, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
PR_SET_CHILD_SUBREAPER = 36
SECURE_ALL_BITS_LOCKED = 0xEF  # noroot, no-setuid-fixup, keep-caps locked, no-ambient-raise
CAP_VERSION_3 = 0x20080522


class SandboxError(RuntimeError):
    pass


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(err)}")


def _mount(libc: ctypes.CDLL, source: Optional[str], target: str, fstype: Optional[str],
           flags: int, data: Optional[str] = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    rc = libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _check(rc, f"mount {fstype or 'bind'} on {target}")


def _mount_setattr(libc: ctypes.CDLL, path: str, flags: int, attr_set: int, attr_clr: int) -> None:
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    rc = libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), path.encode(),
                      ctypes.c_uint(flags), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    _check(rc, f"mount_setattr {path}")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _outermost(paths: list[str]) -> list[str]:
    out: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(_under(p, q) for q in out):
            out.append(p)
    return out


def _drop_privileges(libc: ctypes.CDLL) -> None:
    libc.prctl(PR_SET_SECUREBITS, ctypes.c_ulong(SECURE_ALL_BITS_LOCKED), 0, 0, 0)  # best effort
    try:
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
    header = _CapHeader(CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def sandbox(hide: list[str], keep: list[str], writable: list[str]) -> dict[str, Any]:
    """Hide, re-expose, make read-only, drop privileges. Raises SandboxError if hiding fails."""
    libc = _libc()
    cwd = os.getcwd()
    hide = _outermost([os.path.realpath(p) for p in hide if os.path.lexists(p)])
    keep = [os.path.realpath(p) for p in keep if os.path.exists(p)]
    writable = [os.path.realpath(p) for p in writable if os.path.isdir(p)]
    # 1. Hold on to what must stay reachable under a hidden path.
    held: list[tuple[str, int, bool]] = []
    for p in dict.fromkeys(keep + writable):
        if any(_under(p, h) for h in hide):
            held.append((p, os.open(p, os.O_PATH | os.O_CLOEXEC), os.path.isdir(p)))
    # 2. Hide.
    for h in hide:
        if os.path.isdir(h):
            _mount(libc, "sremarathon-hidden", h, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                   "size=1m,mode=0755")
        else:
            _mount(libc, "/dev/null", h, None, MS_BIND)
    # 3. Put kept paths back (mount points are created inside the fresh tmpfs).
    for p, fd, is_dir in held:
        if is_dir:
            os.makedirs(p, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            open(p, "a").close()
        _mount(libc, f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC)
        os.close(fd)
    for h in hide:
        if os.path.isdir(h):
            _mount(libc, None, h, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # 4. Read-only everything except the workspace (best effort: needs Linux >= 5.12).
    readonly = True
    try:
        for w in writable:
            if not any(p == w for p, _, _ in held):
                _mount(libc, w, w, None, MS_BIND | MS_REC)  # its own mount, to keep it writable
        _mount_setattr(libc, "/", AT_RECURSIVE, MOUNT_ATTR_RDONLY, 0)
        for w in writable:
            _mount_setattr(libc, w, 0, 0, MOUNT_ATTR_RDONLY)
        if os.path.isdir("/dev/shm"):
            _mount(libc, "sremarathon-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    except SandboxError as exc:
        readonly = False
        sys.stderr.write(f"[sremarathon] sandbox: read-only root not applied ({exc})\n")
    os.chdir(cwd)  # re-resolve the working directory through the new mounts
    # 5. No way back.
    _drop_privileges(libc)
    return {"hidden": hide, "readonly_root": readonly, "caps_dropped": True}


def _probe(hide: list[str], keep: list[str], writable: list[str], info: dict[str, Any]) -> dict[str, Any]:
    """Check that the sandbox really holds (used once per process by the host's detection)."""
    hide, keep, writable = ([os.path.realpath(p) for p in ps] for ps in (hide, keep, writable))
    checks: dict[str, Any] = dict(info)
    hide_ok = True
    for h in hide:
        if os.path.isdir(h):
            allowed = {os.path.relpath(k, h).split(os.sep)[0] for k in keep + writable if _under(k, h) and k != h}
            hide_ok = hide_ok and set(os.listdir(h)) <= allowed
        else:
            hide_ok = hide_ok and os.path.getsize(h) == 0
    checks["hide_ok"] = hide_ok
    checks["keep_ok"] = all(os.path.exists(k) for k in keep)
    try:
        for w in writable:
            with open(os.path.join(w, ".sremarathon-probe"), "w") as f:
                f.write("ok")
            os.unlink(os.path.join(w, ".sremarathon-probe"))
        checks["writable_ok"] = True
    except OSError:
        checks["writable_ok"] = False
    status = open("/proc/self/status").read()
    checks["cap_eff"] = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("CapEff:")), "?")
    checks["pid"] = os.getpid()
    return checks


# --- the protocol loop ----------------------------------------------------------------------


class Worker:
    """Holds the agent between steps and answers one request at a time."""

    def __init__(self) -> None:
        self.agent: Any = None
        self.env: Any = None

    def handle(self, msg: dict[str, Any]) -> Optional[dict[str, Any]]:
        op = msg.get("op")
        if op == "setup":
            return self._setup(msg)
        if op == "step":
            return self._step(msg)
        if op == "close":
            return None
        return _fail("error", f"unknown op {op!r}")

    def _setup(self, msg: dict[str, Any]) -> dict[str, Any]:
        from datetime import timedelta
        from pathlib import Path

        from .clients import PipelineClient, TelemetryClient
        from .loader import AgentLoadError, resolve_agent
        from .protocol import Environment, EnvironmentWire

        try:
            wire = EnvironmentWire.model_validate(msg.get("env"))
        except ValueError as exc:
            return _fail("error", f"malformed setup request: {_first(exc)}")
        self.env = Environment(
            workspace=Path(wire.workspace), kubeconfig=Path(wire.kubeconfig), apps=list(wire.apps),
            cadence=timedelta(seconds=wire.cadence_seconds),
            pipeline=PipelineClient(wire.server, wire.token),
            telemetry=TelemetryClient(wire.server, wire.token), prometheus_url=wire.prometheus_url,
            alertmanager_url=wire.alertmanager_url, jaeger_url=wire.jaeger_url,
            mcp_url=wire.mcp_url, token=wire.token)
        try:
            factory = resolve_agent(str(msg.get("agent")))
        except AgentLoadError as exc:
            return _fail("load", str(exc))
        try:
            agent = factory()
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            return _fail("error", f"creating the agent failed: {_describe(exc)}", exc)
        if not callable(getattr(agent, "step", None)):
            return _fail("load", f"{msg.get('agent')!r} made a {type(agent).__name__} without a step(obs) "
                                 "method; an agent needs step(self, obs) -> Report")
        setup = getattr(agent, "setup", None)
        if callable(setup):
            try:
                setup(self.env)
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                return _fail("error", f"setup raised {_describe(exc)}", exc)
        self.agent = agent
        return {"ok": True}

    def _step(self, msg: dict[str, Any]) -> dict[str, Any]:
        from .protocol import Observation, ObservationWire

        if self.agent is None:
            return _fail("error", "step before a successful setup")
        try:
            obs = Observation(ObservationWire.model_validate(msg.get("obs")), self.env)
        except ValueError as exc:
            return _fail("error", f"malformed step request: {_first(exc)}")
        try:
            result = self.agent.step(obs)
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            return _fail("error", _describe(exc), exc)
        return _report_reply(result)


def _report_reply(result: Any) -> dict[str, Any]:
    from pydantic import ValidationError

    from .protocol import Report

    if result is None:
        report = Report()
    elif isinstance(result, Report):
        report = result
    elif isinstance(result, dict):
        try:
            report = Report.model_validate(result)
        except ValidationError as exc:
            return _fail("invalid", f"step returned an invalid report: {_validation_summary(exc)}")
    else:
        return _fail("invalid", f"step returned a {type(result).__name__}, expected a Report, a dict or None")
    try:
        # Re-validate: a Report instance may have been mutated after construction.
        data = Report.model_validate(report.model_dump()).model_dump(mode="json")
    except (ValidationError, ValueError, TypeError) as exc:
        return _fail("invalid", f"step returned an invalid report: {_first(exc)}")
    return {"ok": True, "report": data}


def _validation_summary(exc: Any) -> str:
    try:
        errs = exc.errors()
        first = errs[0]
        loc = ".".join(str(x) for x in first.get("loc", ())) or "report"
        more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
        return f"{loc}: {first.get('msg')}{more}"
    except Exception:  # noqa: BLE001
        return _first(exc)


def _first(exc: BaseException) -> str:
    from .loader import one_line

    return one_line(exc)


def _describe(exc: BaseException) -> str:
    msg = _first(exc)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _fail(kind: str, error: str, exc: Optional[BaseException] = None) -> dict[str, Any]:
    from .loader import one_line

    out: dict[str, Any] = {"ok": False, "kind": kind, "error": one_line(error, 1000)}
    if exc is not None:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        out["traceback"] = tb[-MAX_TRACEBACK:]
    return out


def serve() -> int:
    # Move the protocol off fds 0/1 before any agent code can touch them.
    sys.stdout.flush()
    proto_in, proto_out = os.dup(0), os.dup(1)  # dup'ed fds are close-on-exec
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    # typeshed types sys.stdout as TextIO; at run time it is a TextIOWrapper, which has reconfigure
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    rfile = os.fdopen(proto_in, "rb")
    wfile = os.fdopen(proto_out, "wb")
    worker = Worker()
    for raw in rfile:
        try:
            msg = json.loads(raw)
            if not isinstance(msg, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            reply: dict[str, Any] = _fail("error", f"unreadable request: {exc}")
            msg = {}
        else:
            handled = worker.handle(msg)
            if handled is None:
                break
            reply = handled
        if "id" in msg:
            reply["id"] = msg["id"]
        try:
            line = json.dumps(reply, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except ValueError as exc:  # NaN/inf slipped through
            line = json.dumps(_fail("invalid", f"report is not JSON-serialisable: {exc}") | {"id": msg.get("id")})
        wfile.write(line.encode() + b"\n")
        wfile.flush()
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


def _apply_rlimits(specs: list[str]) -> None:
    """``--rlimit DATA=BYTES`` / ``FSIZE=BYTES``: set before the agent runs, inherited by all
    it starts (agent_limits.py says which and why). Lowering a limit never fails for lack of
    privilege; a value above the hard limit is clipped to it."""
    import resource

    for spec in specs:
        name, _, value = spec.partition("=")
        which = getattr(resource, f"RLIMIT_{name}", None)
        if which is None or not value.isdigit():
            continue
        _, hard = resource.getrlimit(which)
        n = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        try:
            resource.setrlimit(which, (n, n))
        except (ValueError, OSError) as exc:
            sys.stderr.write(f"[sremarathon] cannot set RLIMIT_{name}: {exc}\n")


def _parse_args(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {"sandbox": False, "probe": False, "hide": [], "keep": [], "writable": [], "exec": None,
                            "rlimit": []}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--sandbox", "--probe"):
            opts[a[2:]] = True
        elif a in ("--hide", "--keep", "--writable", "--rlimit") and i + 1 < len(argv):
            opts[a[2:]].append(argv[i + 1])
            i += 1
        elif a == "--exec":
            opts["exec"] = argv[i + 1:]
            break
        else:
            raise SystemExit(f"sremarathon worker: unexpected argument {a!r}")
        i += 1
    return opts


def main(argv: Optional[list[str]] = None) -> int:
    opts = _parse_args(sys.argv[1:] if argv is None else argv)
    info: dict[str, Any] = {}
    if opts["sandbox"]:
        try:
            info = sandbox(opts["hide"], opts["keep"], opts["writable"])
        except (SandboxError, OSError) as exc:
            sys.stderr.write(f"[sremarathon] sandbox setup failed, refusing to run the agent: {exc}\n")
            return EXIT_SANDBOX_FAILED
    _apply_rlimits(opts["rlimit"])
    # The agent's root adopts its tree's orphans (kept across exec): a child whose parent died
    # stays in the tree, where the host's watchdog finds and ends it (agent_limits.kill_tree).
    try:
        _libc().prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if opts["probe"]:
        sys.stdout.write(json.dumps(_probe(opts["hide"], opts["keep"], opts["writable"], info)) + "\n")
        return 0
    if opts["exec"]:
        cmd = opts["exec"]
        try:
            os.execvp(cmd[0], cmd)
        except OSError as exc:
            sys.stderr.write(f"[sremarathon] cannot run agent command {cmd[0]!r}: {exc}\n")
            return EXIT_EXEC_FAILED
    return serve()


if __name__ == "__main__":
    sys.exit(main())
