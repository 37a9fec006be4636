"""Per-step command agents (``--agent-exec "COMMAND"``, issue 17): COMMAND started once per step.

The command line runs under ``/bin/sh -c`` (so ``$SREMARATHON_MCP_CONFIG`` expands) inside the
agent's isolation and limits (:meth:`AgentHost.wrap`), in the workspace, with the agent's
environment plus:

=========================  ======================================================================
``SREMARATHON_OBSERVATION`` a JSON file of the step's observation (``ObservationWire``)
``SREMARATHON_MCP_URL``     the run's MCP server (streamable HTTP)
``SREMARATHON_MCP_CONFIG``  an ``mcpServers`` file naming it, with the ``Authorization`` header
``SREMARATHON_TOKEN``       the bearer token of the MCP server, the API server and the pipeline
``SREMARATHON_STEP``        the step's number
``KUBECONFIG``              the agent's kubeconfig (as for every agent)
=========================  ======================================================================

The step's report is what the command submitted through the MCP tools, merged with a report it
printed on stdout (a ``Report`` JSON object: the whole output, or its last line); stdout that is
neither is ``invalid``. A non-zero exit is ``error`` (with the last stderr line), no exit within
the step budget is ``timeout``, a crossed limit is ``limit``; the process tree is killed when the
step ends either way (nothing the command started outlives its step). stderr goes to the agent's
stderr log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional, Protocol

from pydantic import ValidationError

from .agent.loader import one_line
from .agent.protocol import ObservationWire, Report
from .agent_limits import NO_LIMITS, AgentLimits, Watchdog

#: (outcome, report, error), which the host turns into its StepOutcome.
Result = tuple[str, Optional[Report], Optional[str]]

MAX_STDOUT = 8 * 1024 * 1024
STDERR_TAIL = 8192
_MEMORY_WORDS = ("MemoryError", "Cannot allocate memory", "out of memory", "JavaScript heap out of memory",
                 "cannot allocate", "std::bad_alloc")


class Log(Protocol):
    def write(self, data: bytes) -> None: ...
    def note(self, text: str) -> None: ...


class _Pump(threading.Thread):
    """Reads one pipe to its end: keeps up to ``cap`` bytes (stdout), or hands every chunk to
    ``sink`` and keeps the last ``cap`` bytes (stderr)."""

    def __init__(self, stream: Optional[IO[bytes]], cap: int, sink: Optional[Log] = None) -> None:
        super().__init__(daemon=True, name="agent-exec-pipe")
        self.stream = stream
        self.cap = cap
        self.sink = sink
        self.data = bytearray()
        self.overflow = False
        self.start()

    def run(self) -> None:
        stream = self.stream
        assert stream is not None
        try:
            while True:
                # typeshed types Popen's pipes as IO[bytes]; with the default bufsize they are BufferedReaders
                chunk = stream.read1(65536)  # type: ignore[attr-defined]
                if not chunk:
                    break
                if self.sink is not None:
                    self.sink.write(chunk)
                    self.data = (self.data + chunk)[-self.cap:]
                elif len(self.data) + len(chunk) > self.cap:
                    self.overflow = True
                else:
                    self.data += chunk
        except (OSError, ValueError):
            pass
        finally:
            try:
                stream.close()
            except (OSError, ValueError):
                pass


def _exited(pid: int) -> bool:
    """Has ``pid`` exited? Without reaping it: its pid (the group's id) stays ours to signal."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True


@dataclass
class StepCommand:
    """What one step's command needs from the host."""

    wrap: Callable[[list[str]], list[str]]  # argv in the agent's isolation, with its rlimits
    workspace: Path
    env: dict[str, str]  # the agent's environment (KUBECONFIG, PROMETHEUS_URL, SREMARATHON_MCP_URL…)
    token: str
    mcp_config: Optional[Path]
    budget: float
    simulating: Callable[[], float]  # wall seconds spent simulating for the agent: not its budget
    limits: Optional[AgentLimits]
    log: Log


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_step_command(command: str, c: StepCommand, wire: ObservationWire) -> Result:
    state = c.workspace / ".sremarathon"
    state.mkdir(exist_ok=True)
    obs_file = state / "observation.json"
    obs_file.write_text(wire.model_dump_json())
    env = dict(c.env)
    env.update({"SREMARATHON_OBSERVATION": str(obs_file), "SREMARATHON_TOKEN": c.token,
                "SREMARATHON_STEP": str(wire.step)})
    if c.mcp_config is not None:
        env["SREMARATHON_MCP_CONFIG"] = str(c.mcp_config)
    argv = c.wrap(["/bin/sh", "-c", command])
    try:
        proc = subprocess.Popen(argv, cwd=str(c.workspace), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                close_fds=True)
    except OSError as exc:
        return "dead", None, f"cannot start the step command: {one_line(exc)}"
    watchdog = Watchdog(proc.pid, c.limits or NO_LIMITS, c.workspace)
    out = _Pump(proc.stdout, MAX_STDOUT)
    err = _Pump(proc.stderr, STDERR_TAIL, sink=c.log)
    deadline = time.monotonic() + c.budget
    timed_out = False
    while not _exited(proc.pid):
        if watchdog.tripped:
            break
        if time.monotonic() > deadline + c.simulating():
            timed_out = True
            break
        time.sleep(0.02)
    watchdog.end_step()  # the workspace's last look: filled, then exited between two polls
    # The step is over: the command's whole tree goes, in its group or not (then it is reaped).
    # The watchdog first: it stops the tree before killing it, leaves first (a group kill first
    # would orphan the children that left the group before they are found).
    watchdog.stop()
    _killpg(proc.pid)
    code = proc.wait()
    if code > 128 and code - 128 in signal.valid_signals():
        code = 128 - code  # the shell's "killed by signal N" (128 + N), as Popen spells it: -N
    out.join(timeout=2.0)
    err.join(timeout=2.0)
    tail = err.data.decode("utf-8", "replace")
    last = next((ln.strip() for ln in reversed(tail.splitlines())
                 if ln.strip() and not ln.startswith("[sremarathon]")), "")
    lim = c.limits
    if watchdog.tripped:
        c.log.note(f"step {wire.step}: {watchdog.tripped}; the step command was killed")
        return "limit", None, watchdog.tripped
    if timed_out:
        c.log.note(f"step exceeded its budget of {c.budget:g} s; the step command was killed")
        return "timeout", None, f"step exceeded its budget of {c.budget:g} s"
    if code == -signal.SIGXFSZ:
        return "limit", None, lim.workspace_error() if lim else "file size limit reached"
    if code != 0:
        if lim is not None and lim.workspace and "File too large" in tail:  # EFBIG: RLIMIT_FSIZE (SIGXFSZ ignored)
            return "limit", None, f"{lim.workspace_error()} ({one_line(last, 200)})"
        if lim is not None and lim.memory and any(w in tail for w in _MEMORY_WORDS):
            return "limit", None, f"{lim.memory_error()} ({one_line(last, 200)})"
        how = f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() \
            else f"exited with code {code}"
        return "error", None, f"step command {how}" + (f"; last stderr line: {one_line(last, 300)}" if last else "")
    if out.overflow:
        return "invalid", None, f"step command wrote more than {MAX_STDOUT} bytes to stdout"
    return _report(out.data.decode("utf-8", "replace"))


def _report(text: str) -> Result:
    """A report printed on stdout: the whole output or its last line; nothing at all is no report
    (what the MCP tools took is the step's report then)."""
    text = text.strip()
    if not text:
        return "ok", None, None
    doc = None
    for candidate in (text, text.splitlines()[-1]):
        try:
            doc = json.loads(candidate)
            break
        except ValueError:
            continue
    if not isinstance(doc, dict):
        what = "not JSON" if doc is None else f"a JSON {type(doc).__name__}"
        return "invalid", None, (f"step command printed {what} on stdout, expected a report object (or nothing): "
                                 f"{one_line(text, 120)!r}")
    try:
        return "ok", Report.model_validate(doc), None
    except ValidationError as exc:
        errs = exc.errors()
        loc = ".".join(str(x) for x in errs[0].get("loc", ())) or "report"
        return "invalid", None, f"invalid report: {loc}: {errs[0].get('msg')}"
