"""Run an untrusted agent in its own process and talk to it one step at a time.

:class:`AgentHost` owns the agent's process (see ``worker.py`` for the wire framing):

* **Process.** ``python -m pytest_sremarathon.agent.worker`` for ``--agent=pkg.mod:Class``, or the
  user's command for ``--agent-cmd``; for ``--agent-exec`` a shell command started once per step
  (``agent_exec.py``). Its own session/process group, cwd = the workspace, an environment
  scrubbed to ``PATH`` (the interpreter's bin first), ``HOME`` (= workspace), ``LANG``,
  ``KUBECONFIG``, ``TMPDIR`` (= ``<workspace>/.tmp``), ``PYTHONPATH`` (the host's import roots,
  minus anything under a hidden path), ``PROMETHEUS_URL``, ``ALERTMANAGER_URL``, ``JAEGER_URL`` (the monitoring
  namespace's services, those the backend has), ``SREMARATHON_MCP_URL`` (the run's MCP server, once attached), plus
  the host's ``SREMARATHON_LLM_*`` settings (:data:`PASS_THROUGH_PREFIXES`). The endpoint token
  travels inside the setup message, and (the issue's contract for per-step commands) in a step
  command's ``SREMARATHON_TOKEN``; never on argv.
* **Limits** (``agent_limits.py``): rlimits set by the worker's prelude before the agent runs, a
  watchdog over the whole process tree; a crossing is the ``"limit"`` outcome naming the limit,
  and nothing the agent started outlives its process (or, for a step command, its step).
* **MCP** (:meth:`AgentHost.attach_mcp`): what the run's MCP tools submit during a step is merged
  into the step's report.
* **Isolation.** When ``unshare`` works (detected once per interpreter), the process runs in new
  mount + PID namespaces with a private ``/proc``: it sees no process of ours (no environ,
  cmdline or memory), every ``hide`` path is covered by an empty read-only tmpfs (the workspace
  and kubeconfig are bound back if they live under one), the rest of the filesystem is
  read-only except the workspace, and all capabilities are dropped (``worker.sandbox``).
  :attr:`AgentHost.isolation` is ``"namespaces"`` or ``"none"`` (plain subprocess) for the
  record; ``isolation_detail`` says why.
* **Failures never stop the marathon.** A step that raises → ``"error"`` (one line; the
  traceback goes to the agent's stderr log); garbage → ``"invalid"``; no answer within
  ``step_budget`` wall seconds → ``"timeout"``; the process gone → ``"dead"``. After a timeout,
  a death or an unreadable protocol line the whole process group is killed (the PID namespace
  dies with it) and the next step starts a fresh process and re-runs ``setup``.
* **Setup failures.** A failed setup is returned as that call's outcome and retried at the next
  step; after ``max_setup_failures`` consecutive failures (default 3) the agent is *disabled*:
  every later step is ``"dead"`` at once with the last setup error. A successful setup resets
  the count.
* **stderr** of every incarnation is appended to ``stderr_path`` (tracebacks and host notes too,
  prefixed ``[sremarathon]``), capped at ``stderr_cap`` bytes (5 MB) with a truncation note.
* Waiting is bounded everywhere: a reader thread feeds a queue read with deadlines, a writer
  thread absorbs a peer that does not read.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from pydantic import ValidationError

from .agent.loader import one_line
from .agent.protocol import EnvironmentWire, ObservationWire, Report
from .agent_limits import NO_LIMITS, AgentLimits, Watchdog
from .events import AgentStep

if TYPE_CHECKING:
    from .agent_tools.submissions import StepSubmissions

__all__ = ["AgentHost", "AgentSpec", "StepOutcome", "Outcome", "detect_isolation"]

Outcome = Literal["ok", "error", "timeout", "invalid", "dead", "limit"]
Isolation = Literal["namespaces", "none"]

MAX_LINE = 32 * 1024 * 1024
STDERR_CAP = 5 * 1024 * 1024
WORKER_MODULE = "pytest_sremarathon.agent.worker"


# --- public records -------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentSpec:
    """Which agent to run: ``agent="pkg.mod:Class"`` (``--agent``), ``cmd=[argv…]``
    (``--agent-cmd``) or ``exec="COMMAND"`` (``--agent-exec``: a shell command line started once
    per step)."""

    agent: Optional[str] = None
    cmd: Optional[tuple[str, ...]] = None
    exec: Optional[str] = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.agent, self.cmd, self.exec)) != 1:
            raise ValueError("AgentSpec needs exactly one of agent=, cmd= or exec=")
        if self.cmd is not None and not self.cmd:
            raise ValueError("AgentSpec.cmd is empty")
        if self.exec is not None and not self.exec.strip():
            raise ValueError("AgentSpec.exec is empty")

    @classmethod
    def from_options(cls, agent: Optional[str] = None, agent_cmd: Optional[str] = None,
                     *, cwd: Optional[Path] = None, agent_exec: Optional[str] = None) -> AgentSpec:
        """From the ``--agent`` / ``--agent-cmd`` / ``--agent-exec`` option strings. A command path
        containing a slash is made absolute against ``cwd`` (the invocation directory), because
        the agent runs in its workspace; in an ``--agent-exec`` line, so is every word that names
        an existing file or directory relative to ``cwd`` (``python agents/mine.py``)."""
        if sum(x is not None for x in (agent, agent_cmd, agent_exec)) > 1:
            raise ValueError("give one of --agent, --agent-cmd or --agent-exec")
        if agent_exec is not None:
            return cls(exec=_absolute_words(agent_exec, Path(cwd or os.getcwd())))
        if agent_cmd is not None:
            argv = shlex.split(agent_cmd)
            if not argv:
                raise ValueError("--agent-cmd is empty")
            if "/" in argv[0] and not os.path.isabs(argv[0]):
                argv[0] = os.path.abspath(os.path.join(cwd or os.getcwd(), argv[0]))
            return cls(cmd=tuple(argv))
        if agent is None:
            raise ValueError("one of --agent, --agent-cmd or --agent-exec is required")
        return cls(agent=agent)

    @property
    def label(self) -> str:
        """The agent id recorded in the run (``pkg.mod:Class``, ``cmd:<command line>`` or
        ``exec:<command line>``)."""
        if self.exec is not None:
            return "exec:" + self.exec
        return self.agent if self.agent is not None else "cmd:" + shlex.join(self.cmd or ())


def _absolute_words(command: str, cwd: Path) -> str:
    """``command`` with each relative word that names an existing path under ``cwd`` (and holds a
    slash, so ``python`` stays a program name) replaced by its absolute path, quoted."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    out = command
    for w in dict.fromkeys(words):
        if "/" in w and not os.path.isabs(w) and (cwd / w).exists() and w in out:
            out = out.replace(w, shlex.quote(str((cwd / w).resolve())))
    return out


@dataclass(frozen=True)
class StepOutcome:
    outcome: Outcome
    report: Optional[Report]
    error: Optional[str]
    wall_seconds: float

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def record(self, step: int) -> AgentStep:
        """The ``agent.step`` event data for this outcome."""
        return AgentStep(step=step, outcome=self.outcome, error=self.error, report=self.report)


# --- isolation detection --------------------------------------------------------------------

_UNSHARE_FLAGS = ["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
_detected: dict[str, tuple[Isolation, list[str], str]] = {}
_detect_lock = threading.Lock()


def _scrubbed_env(home: str, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH") or os.defpath,
        "HOME": home,
        "LANG": os.environ.get("LANG") or "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra or {})
    return env


#: Host variables an agent may receive: the LLM agent's endpoint, model and key
#: (``SREMARATHON_LLM_URL``, ``…_MODEL``, ``…_KEY``, ``…_STEP_SECONDS``).
PASS_THROUGH_PREFIXES = ("SREMARATHON_LLM_",)


def _passed_through() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(PASS_THROUGH_PREFIXES)}


def _python_path(hide: list[str]) -> str:
    """The host's import roots that a child of the same interpreter would not already have."""
    skip_prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    out: list[str] = []
    for entry in sys.path:
        path = os.path.realpath(entry or os.getcwd())
        if not os.path.exists(path) or path in out:
            continue
        if any(_under(path, p) for p in skip_prefixes) or any(_under(path, h) for h in hide):
            continue
        out.append(path)
    return os.pathsep.join(out)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def detect_isolation(python: str = sys.executable) -> tuple[Isolation, list[str], str]:
    """``(mode, unshare prefix argv, detail)``; probed once per interpreter.

    Runs the real sandbox prelude in fresh namespaces against a scratch directory (as root,
    or as an unprivileged user through ``--user --map-root-user``) and accepts only if hiding,
    re-exposing, the writable workspace and the capability drop all verifiably worked.
    """
    with _detect_lock:
        if python in _detected:
            return _detected[python]
        _detected[python] = result = _probe_isolation(python)
        return result


def _probe_isolation(python: str) -> tuple[Isolation, list[str], str]:
    if not sys.platform.startswith("linux"):
        return "none", [], f"no Linux namespaces on {sys.platform}"
    unshare = shutil.which("unshare")
    if unshare is None:
        return "none", [], "unshare(1) not found"
    candidates = [[unshare, *_UNSHARE_FLAGS]]
    candidates.append([unshare, "--user", "--map-root-user", *_UNSHARE_FLAGS])
    if os.geteuid() != 0:
        candidates.reverse()
    last = ""
    with tempfile.TemporaryDirectory(prefix="sremarathon-probe-") as tmp:
        hidden = os.path.join(tmp, "hidden")
        ws = os.path.join(hidden, "ws")
        os.makedirs(ws)
        Path(hidden, "secret").write_text("x")
        Path(hidden, "kubeconfig").write_text("x")
        env = _scrubbed_env(ws, {"PYTHONPATH": _python_path([hidden])})
        for prefix in candidates:
            argv = [*prefix, "--", python, "-m", WORKER_MODULE, "--sandbox", "--probe", "--hide", hidden,
                    "--keep", os.path.join(hidden, "kubeconfig"), "--writable", ws]
            try:
                proc = subprocess.run(argv, cwd=ws, env=env, stdin=subprocess.DEVNULL,
                                      capture_output=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as exc:
                last = one_line(exc)
                continue
            if proc.returncode != 0:
                last = one_line(proc.stderr.decode(errors="replace")) or f"exit code {proc.returncode}"
                continue
            try:
                checks = json.loads(proc.stdout.decode().strip().splitlines()[-1])
            except (ValueError, IndexError):
                last = "probe gave no answer"
                continue
            good = (checks.get("hide_ok") and checks.get("keep_ok") and checks.get("writable_ok")
                    and checks.get("cap_eff") == "0" * 16 and checks.get("pid") == 1)
            if good:
                how = "user namespace" if "--user" in prefix else "root"
                ro = "read-only root" if checks.get("readonly_root") else "root left writable"
                return "namespaces", prefix, f"mount+pid namespaces ({how}), hidden paths, {ro}, no capabilities"
            last = f"probe checks failed: {checks}"
    return "none", [], f"namespaces unavailable: {last}"


# --- the agent's process --------------------------------------------------------------------


class _StderrLog:
    """Append-only, size-capped log of the agent's stderr across incarnations."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path = path
        self.cap = cap
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "ab")
        self._size = self._fh.tell()
        self._truncated = self._size >= cap
        self._lock = threading.Lock()
        self.last_line = ""

    def write(self, data: bytes) -> None:
        with self._lock:
            for line in data.decode("utf-8", "replace").splitlines():
                if line.strip() and not line.startswith("[sremarathon]"):
                    self.last_line = line.strip()
            if self._fh.closed or self._truncated:
                return
            room = self.cap - self._size
            if len(data) > room:
                data = data[:max(room, 0)]
                data += f"\n[sremarathon] agent stderr truncated at {self.cap} bytes; further output discarded\n".encode()
                self._truncated = True
            self._fh.write(data)
            self._fh.flush()
            self._size += len(data)

    def note(self, text: str) -> None:
        self.write(("[sremarathon] " + text.rstrip("\n") + "\n").encode())

    def close(self) -> None:
        with self._lock:
            self._fh.close()


_EOF = object()
_OVERSIZE = object()


class _Process:
    """One incarnation of the agent's process with its pump threads."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, log: _StderrLog,
                 limits: Optional[AgentLimits] = None) -> None:
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True, close_fds=True)
        self.log = log
        # The tree's memory, process count and workspace, watched for as long as it lives.
        self.watchdog = Watchdog(self.proc.pid, limits or NO_LIMITS, Path(cwd))
        self.lines: queue.Queue[Any] = queue.Queue()
        self._outbox: queue.Queue[Optional[bytes]] = queue.Queue()
        self._stderr_pump = threading.Thread(target=self._read_stderr, name="agent-stderr", daemon=True)
        self._threads = [
            threading.Thread(target=self._read_stdout, name="agent-stdout", daemon=True),
            self._stderr_pump,
            threading.Thread(target=self._write_stdin, name="agent-stdin", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_stdout(self) -> None:
        out = self.proc.stdout
        assert out is not None
        try:
            while True:
                line = out.readline(MAX_LINE + 1)
                if not line:
                    break
                if len(line) > MAX_LINE and not line.endswith(b"\n"):
                    self.lines.put(_OVERSIZE)
                    while line and not line.endswith(b"\n"):  # skip the rest of that line
                        line = out.readline(1024 * 1024)
                    continue
                self.lines.put(line)
        except (OSError, ValueError):
            pass
        finally:
            # The reading thread owns the stream: closing it from elsewhere would block on the
            # buffer lock while a surviving grandchild keeps the pipe open.
            out.close()
        self.lines.put(_EOF)

    def _read_stderr(self) -> None:
        err = self.proc.stderr
        assert err is not None
        try:
            while True:
                # typeshed types Popen's pipes as IO[bytes]; with the default bufsize they are BufferedReaders
                chunk = err.read1(65536)  # type: ignore[attr-defined]
                if not chunk:
                    break
                self.log.write(chunk)
        except (OSError, ValueError):
            pass
        finally:
            err.close()

    def _write_stdin(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            while True:
                data = self._outbox.get()
                if data is None:
                    break
                stdin.write(data)
                stdin.flush()
        except (OSError, ValueError):
            pass
        finally:
            try:
                stdin.close()
            except (OSError, ValueError):
                pass

    def send(self, msg: dict[str, Any], encoded: Optional[dict[str, str]] = None) -> None:
        """Queue one protocol line: ``msg``, then the members of ``encoded`` (name -> its value's
        JSON text, e.g. pydantic's ``model_dump_json``) appended to the object."""
        text = json.dumps(msg, separators=(",", ":"), ensure_ascii=False)
        if encoded:
            text = text[:-1] + "".join(f",{json.dumps(k, ensure_ascii=False)}:{v}" for k, v in encoded.items()) + "}"
        self._outbox.put(text.encode() + b"\n")

    def recv(self, deadline: float) -> Any:
        """The next stdout line, :data:`_EOF`, :data:`_OVERSIZE`, or ``None`` at the deadline.

        A process that has exited counts as EOF even if a forked grandchild still holds the
        pipe open."""
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self.lines.get(timeout=max(0.0, min(remaining, 0.25)))
            except queue.Empty:
                pass
            if self.exited():
                try:
                    return self.lines.get(timeout=0.2)  # a last line written just before exiting
                except queue.Empty:
                    return _EOF
            if remaining <= 0.25:
                return None

    def stderr_logged(self, wait: float = 1.0) -> None:
        """Wait (at most ``wait`` seconds) until everything the process wrote to stderr is in
        the log: its stdout can reach EOF before its last stderr lines are pumped. A grandchild
        that keeps the pipe open ends the wait at the timeout."""
        self._stderr_pump.join(wait)

    def exited(self) -> bool:
        """Has the process exited? (Without reaping it, see :meth:`exit_description`.)"""
        if self.proc.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
        except ChildProcessError:
            return True

    def drain(self) -> list[bytes]:
        stale: list[bytes] = []
        while True:
            try:
                item = self.lines.get_nowait()
            except queue.Empty:
                return stale
            if item is _EOF:
                self.lines.put(_EOF)
                return stale
            if isinstance(item, bytes):
                stale.append(item)

    def exit_description(self, wait: float = 1.0) -> str:
        """How the process ended, read without reaping it (its pid keeps the group id reserved
        until :meth:`kill` has signalled the group)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
            except ChildProcessError:
                info = None
                code = self.proc.returncode
                if code is None:
                    return "agent process ended"
                break
            if info is not None:
                code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                break
            if time.monotonic() > deadline:
                return "agent process closed its output but is still running"
            time.sleep(0.02)
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return f"agent process was killed by {name}"
        return f"agent process exited with code {code}"

    def kill(self) -> None:
        self.watchdog.stop()  # the whole tree, stopped then killed (see agent_limits.kill_tree)
        if self.proc.returncode is None:  # not reaped yet, so the group id is still ours
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the whole group; the PID namespace dies with it
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.kill()  # in case the agent left the group (setsid) without namespaces
        except OSError:
            pass
        self._finish(5.0)

    def close(self, grace: float) -> None:
        """Close stdin, give the agent ``grace`` seconds to leave, then kill what is left."""
        self._outbox.put(None)
        self._threads[0].join(timeout=grace)  # stdout reaches EOF when the agent has exited
        self.kill()

    def _finish(self, wait: float) -> None:
        self.watchdog.stop()  # no descendant outlives the process, in its group or not
        self._outbox.put(None)
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
        for t in self._threads:
            # Readers end at EOF; one may stay blocked (daemon) while an escaped grandchild of a
            # non-isolated agent still holds the pipe.
            t.join(timeout=0.5)


# --- the host -------------------------------------------------------------------------------


class AgentHost:
    """One agent for one run. Not thread-safe: the marathon loop calls it from one thread."""

    def __init__(self, spec: AgentSpec, env: EnvironmentWire, *, step_budget: float, stderr_path: Path,
                 hide: list[Path], setup_budget: Optional[float] = None, max_setup_failures: int = 3,
                 stderr_cap: int = STDERR_CAP, isolation: Literal["auto", "namespaces", "none"] = "auto",
                 python: str = sys.executable, limits: Optional[AgentLimits] = None) -> None:
        if step_budget <= 0:
            raise ValueError("step_budget must be positive")
        self.spec = spec
        self.step_budget = float(step_budget)
        self.setup_budget = float(setup_budget if setup_budget is not None else max(step_budget, 30.0))
        self.max_setup_failures = max(1, int(max_setup_failures))
        self.python = python
        self.limits = limits
        self.workspace = Path(env.workspace).resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)
        # The agent gets absolute paths: it runs elsewhere (cwd = workspace, maybe namespaced).
        self.env = env.model_copy(update={"workspace": str(self.workspace),
                                          "kubeconfig": str(Path(env.kubeconfig).resolve())})
        self.hide = [str(Path(p).resolve()) for p in hide]
        if isolation == "none":
            self.isolation: Isolation = "none"
            self._prefix: list[str] = []
            self.isolation_detail = "disabled by configuration"
        else:
            self.isolation, self._prefix, self.isolation_detail = detect_isolation(python)
            if isolation == "namespaces" and self.isolation != "namespaces":
                raise RuntimeError(f"agent isolation required but {self.isolation_detail}")
        self._log = _StderrLog(Path(stderr_path), stderr_cap)
        self._proc: Optional[_Process] = None
        self._next_id = 0
        self.starts = 0               # processes started (1 + restarts)
        self.setup_failures = 0       # consecutive failed setups
        self.disabled: Optional[str] = None  # why the agent was given up on
        self._closed = False
        #: Wall seconds the host spent simulating on the agent's behalf during the current
        #: exchange (charged think time runs ticks while a request waits): added to the budget.
        self.simulating: Callable[[], float] = lambda: 0.0
        #: What the run's MCP tools submit during a step (report_finding, claim_resolved): opened
        #: and closed around every step, merged into its report (set with :meth:`attach_mcp`).
        self.submissions: Optional[StepSubmissions] = None
        self.mcp_url: Optional[str] = None
        self.mcp_config: Optional[Path] = None

    def attach_mcp(self, url: str, submissions: StepSubmissions) -> None:
        """Give the agent the run's MCP server: its URL (``SREMARATHON_MCP_URL``,
        ``Environment.mcp_url``), an ``mcpServers`` file in the workspace
        (``SREMARATHON_MCP_CONFIG``), and the steps' submissions."""
        from .agent_tools.config import write_mcp_config

        self.mcp_url, self.submissions = url, submissions
        self.mcp_config = write_mcp_config(self.workspace / ".sremarathon" / "mcp.json", url, self.env.token)
        self.env = self.env.model_copy(update={"mcp_url": url})

    # -- lifecycle --

    def __enter__(self) -> AgentHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._proc is not None

    def start(self) -> StepOutcome:
        """Start the process and run setup. Failure is returned (and retried by ``step``)."""
        t0 = time.monotonic()
        if self._closed or self.disabled:
            return StepOutcome("dead", None, self.disabled or "agent host is closed", 0.0)
        if self._proc is not None or self.spec.exec is not None:  # a per-step command starts at each step
            return StepOutcome("ok", None, None, 0.0)
        return replace(self._start(), wall_seconds=time.monotonic() - t0)

    def step(self, obs: Union[ObservationWire, dict[str, Any]]) -> StepOutcome:
        t0 = time.monotonic()
        wire = obs if isinstance(obs, ObservationWire) else ObservationWire.model_validate(obs)
        if self._closed or self.disabled:
            return StepOutcome("dead", None, self.disabled or "agent host is closed", 0.0)
        if self.submissions is not None:
            self.submissions.begin(wire.step, wire)
        try:
            out = self._step(wire)
        finally:
            submitted = self.submissions.end() if self.submissions is not None else None
        if out.ok and submitted is not None:
            from .agent_tools.submissions import merge

            out = replace(out, report=merge(out.report, submitted))
        return replace(out, wall_seconds=time.monotonic() - t0)

    def _step(self, wire: ObservationWire) -> StepOutcome:
        if self.spec.exec is not None:
            return self._exec_step(wire)
        if self._proc is None:
            started = self._start()
            if not started.ok:
                return started
        proc = self._proc
        assert proc is not None
        proc.watchdog.begin_step()  # closely while the step runs, lightly between steps
        # (the observation's JSON from pydantic directly: the cumulative alert history grows to
        # hundreds of alerts, and a dict dump then json.dumps of it took twice as long)
        out = self._exchange({"op": "step"}, self.step_budget, "step", encoded={"obs": wire.model_dump_json()})
        crossed = proc.watchdog.end_step()
        if out.ok and crossed is not None:  # it filled the workspace and returned before a poll saw it
            self._log.note(f"{crossed} during step; the agent process is restarted")
            self._kill()
            return StepOutcome("limit", None, crossed, 0.0)
        return out

    def _exec_step(self, wire: ObservationWire) -> StepOutcome:
        from .agent_exec import StepCommand, run_step_command

        assert self.spec.exec is not None
        self.starts += 1
        self._log.note(f"step {wire.step}: running {self.spec.label} (isolation={self.isolation})")
        outcome, report, error = run_step_command(self.spec.exec, StepCommand(
            wrap=self.wrap, workspace=self.workspace, env=self._child_env(), token=self.env.token,
            mcp_config=self.mcp_config, budget=self.step_budget, simulating=self.simulating, limits=self.limits,
            log=self._log), wire)
        return StepOutcome(outcome, report, error, 0.0)  # type: ignore[arg-type]

    def run_sandboxed(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        """Run ``argv`` as the agent would (its isolation and limits, cwd = the workspace, its
        environment): the MCP ``kubectl`` tool. Exit code 124 when it ran past ``timeout``."""
        proc = subprocess.Popen(self.wrap(argv), cwd=str(self.workspace), env=self._child_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True)
        try:
            out, err = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # not reaped yet: the group id is still ours
            out, err = proc.communicate()
            code = 124
        return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    def close(self) -> None:
        """Ask the agent to stop, then kill whatever is left. Idempotent."""
        if self._closed:
            return
        self._closed = True
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.send({"op": "close", "id": self._new_id()})
            proc.close(grace=2.0)
        self._log.close()

    # -- internals --

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _argv(self) -> list[str]:
        return self.wrap(list(self.spec.cmd) if self.spec.cmd is not None else None)

    def _rlimits(self) -> list[str]:
        lim = self.limits
        if lim is None:
            return []
        out = []
        if lim.memory:
            out += ["--rlimit", f"DATA={lim.memory}"]
        if lim.workspace:
            out += ["--rlimit", f"FSIZE={lim.workspace}"]
        return out

    def wrap(self, inner: Optional[list[str]]) -> list[str]:
        """The argv that runs ``inner`` (None: the Python worker itself) in the agent's
        isolation, with its rlimits set first (by the worker's prelude)."""
        worker = [self.python, "-m", WORKER_MODULE]
        limits = self._rlimits()
        if self.isolation != "namespaces":
            if inner is None:
                return [*worker, *limits]
            return [*worker, *limits, "--exec", *inner] if limits else inner
        sandbox = [*worker, "--sandbox", "--writable", str(self.workspace), "--keep", self.env.kubeconfig, *limits]
        for h in self.hide:
            sandbox += ["--hide", h]
        if inner is not None:
            sandbox += ["--exec", *inner]
        return [*self._prefix, "--", *sandbox]

    def _child_env(self) -> dict[str, str]:
        tmp = self.workspace / ".tmp"
        tmp.mkdir(exist_ok=True)
        env = _scrubbed_env(str(self.workspace), {
            **_passed_through(),
            "KUBECONFIG": self.env.kubeconfig,
            "TMPDIR": str(tmp),
            "PYTHONPATH": _python_path(self.hide),
            **{name: url for name, url in (("PROMETHEUS_URL", self.env.prometheus_url),
                                           ("ALERTMANAGER_URL", self.env.alertmanager_url),
                                           ("JAEGER_URL", self.env.jaeger_url)) if url},
            **({"SREMARATHON_MCP_URL": self.mcp_url} if self.mcp_url else {}),
        })
        # The interpreter's own bin first: `python`, `sremarathon mcp` and the agent's tools of
        # the environment the marathon runs in, whether or not it was activated.
        env["PATH"] = os.pathsep.join([os.path.dirname(self.python), env["PATH"]])
        return env

    def _start(self) -> StepOutcome:
        self.starts += 1
        self._log.note(f"starting agent process #{self.starts} ({self.spec.label}, isolation={self.isolation})")
        try:
            self._proc = _Process(self._argv(), self._child_env(), str(self.workspace), self._log, self.limits)
        except OSError as exc:
            out = StepOutcome("dead", None, f"cannot start the agent process: {one_line(exc)}", 0.0)
            return self._setup_failed(out)
        msg: dict[str, Any] = {"op": "setup", "env": self.env.model_dump(mode="json")}
        if self.spec.agent is not None:
            msg["agent"] = self.spec.agent
        out = self._exchange(msg, self.setup_budget, "setup")
        if out.ok:
            self.setup_failures = 0
            return out
        if self._proc is not None:  # a clean refusal: this process is of no further use
            self._proc.kill()
            self._proc = None
        return self._setup_failed(replace(out, error=f"setup: {out.error}"))

    def _setup_failed(self, out: StepOutcome) -> StepOutcome:
        self.setup_failures += 1
        if self.setup_failures >= self.max_setup_failures:
            self.disabled = (f"agent disabled after {self.setup_failures} failed setups; last: {out.error}")
            self._log.note(self.disabled)
        return out

    def _exchange(self, msg: dict[str, Any], budget: float, phase: str,
                  encoded: Optional[dict[str, str]] = None) -> StepOutcome:
        proc = self._proc
        assert proc is not None
        for stale in proc.drain():
            self._log.note(f"discarded an unsolicited protocol line: {stale[:200]!r}")
        msg["id"] = rid = self._new_id()
        deadline = time.monotonic() + budget
        proc.send(msg, encoded)
        while True:
            item = proc.recv(deadline + self.simulating())
            if item is None and time.monotonic() < deadline + self.simulating():
                continue  # the simulation ran meanwhile: its time is not the agent's
            if item is None:
                self._log.note(f"{phase} exceeded its budget of {budget:g} s; killing the agent process")
                self._kill()
                return StepOutcome("timeout", None, f"{phase} exceeded its budget of {budget:g} s", 0.0)
            if item is _EOF:
                tripped = proc.watchdog.tripped
                if tripped or proc.exit_description().endswith("SIGXFSZ"):
                    why = tripped or (self.limits.workspace_error() if self.limits else "file size limit reached")
                    self._log.note(f"{why} during {phase}; the agent process was killed")
                    self._kill()
                    return StepOutcome("limit", None, why, 0.0)
                why = proc.exit_description()
                proc.stderr_logged()  # (its dying words name the cause more often than not)
                if self._log.last_line:
                    why += f"; last stderr line: {one_line(self._log.last_line, 300)}"
                self._log.note(f"{why} during {phase}")
                self._kill()
                return StepOutcome("dead", None, why, 0.0)
            if item is _OVERSIZE:
                return self._garbage(f"agent wrote a protocol line longer than {MAX_LINE} bytes")
            try:
                reply = json.loads(item)
            except ValueError:
                return self._garbage(f"agent wrote a non-JSON line to the protocol: {one_line(item.decode('utf-8', 'replace'), 120)!r}")
            if not isinstance(reply, dict):
                return self._garbage(f"agent answered with a JSON {type(reply).__name__}, expected an object")
            if "id" in reply and reply["id"] != rid:
                self._log.note(f"discarded a stale answer (id {reply['id']!r}, waiting for {rid})")
                continue
            return self._interpret(reply, phase)

    def _interpret(self, reply: dict[str, Any], phase: str) -> StepOutcome:
        if "ok" in reply:
            if reply["ok"] is True:
                payload = reply.get("report") or {}
            else:
                kind = reply.get("kind")
                error = one_line(reply.get("error") or "agent reported a failure", 1000)
                tb = reply.get("traceback")
                if isinstance(tb, str) and tb.strip():
                    self._log.note(f"{phase} failed: {error}\n{tb[-20000:]}")
                # What the rlimits look like from inside a Python agent (agent_limits.py).
                if error.startswith("MemoryError") and self.limits is not None and self.limits.memory:
                    return StepOutcome("limit", None, f"{self.limits.memory_error()} ({error})", 0.0)
                if "File too large" in error and self.limits is not None and self.limits.workspace:
                    return StepOutcome("limit", None, f"{self.limits.workspace_error()} ({error})", 0.0)
                return StepOutcome("invalid" if kind == "invalid" else "error", None, error, 0.0)
        else:  # --agent-cmd style: a bare Report (or anything, for setup)
            payload = {k: v for k, v in reply.items() if k != "id"}
        if phase == "setup":
            return StepOutcome("ok", None, None, 0.0)
        try:
            report = Report.model_validate(payload)
        except ValidationError as exc:
            errs = exc.errors()
            loc = ".".join(str(x) for x in errs[0].get("loc", ())) or "report"
            more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
            return StepOutcome("invalid", None, f"invalid report: {loc}: {errs[0].get('msg')}{more}", 0.0)
        return StepOutcome("ok", report, None, 0.0)

    def _garbage(self, error: str) -> StepOutcome:
        # The stream can no longer be trusted to stay in step: start afresh next time.
        self._log.note(error + "; restarting the agent process")
        self._kill()
        return StepOutcome("invalid", None, error, 0.0)

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
