"""One exec: the program the client named, looked up among the shell's builtins and the image's
applets, run with the client's streams. The command modules register themselves when imported
here, so the shell never imports them (they import the shell)."""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from . import core, netcmds, textcmds  # noqa: F401 - importing them registers the commands
from .channels import ExecFailure
from .shell import IO, BufIn, Out, Readable, Shell, ShellExit, StreamIn
from .view import ContainerView


class ExecNotFound(ExecFailure):
    """The executable is not in the image: the container runtime refuses to start it."""


def _runtime_error(view: ContainerView, argv: Sequence[str], why: str) -> str:
    """containerd's words when runc cannot start the process (the exec id made deterministic)."""
    exec_id = hashlib.sha256("\0".join([view.hostname, *argv]).encode()).hexdigest()
    return (f'error executing command in container: failed to exec in container: failed to start exec '
            f'"{exec_id}": OCI runtime exec failed: exec failed: unable to start container process: {why}: unknown')


@dataclass(frozen=True)
class ProcessEnd:
    """How a process run by :func:`run_process` ended: its exit ``code``, the virtual ``seconds``
    it took on its own clock (``sleep``, network latency; ``inf`` after ``sleep infinity``), and
    whether the runaway-loop guard stopped it (``stopped``): a container's main process that
    would have run on, such as ``while true; do …; sleep 5; done``."""

    code: int
    seconds: float = 0.0
    stopped: bool = False


def run_exec(view: ContainerView, argv: Sequence[str], stdin: Readable, stdout: Out, stderr: Out, *,
             tty: bool = False) -> int:
    """Run one exec: ``argv`` as the client gave it. Raises :class:`ExecNotFound` (whose message
    is the runtime's) if its program does not exist, like ``exec: "bash": executable file not
    found in $PATH``."""
    return run_process(view, argv, stdin, stdout, stderr, tty=tty).code


def run_process(view: ContainerView, argv: Sequence[str], stdin: Readable, stdout: Out, stderr: Out, *,
                tty: bool = False) -> ProcessEnd:
    """:func:`run_exec`, telling also how long the process ran on its own clock and whether the
    runaway guard stopped it (for a container's main process: the twin keeps it running)."""
    if not argv:
        raise ExecNotFound(_runtime_error(view, argv, "exec: no command given"))
    sh = Shell(view, tty=tty)
    sh.stderr_sink = stderr
    io = IO(stdin if isinstance(stdin, (BufIn, StreamIn)) else StreamIn(stdin), stdout, stderr)
    name = argv[0]
    fn, code, _ = sh.lookup(name)
    if fn is None:
        if "/" not in name:
            why = f'exec: "{name}": executable file not found in $PATH'
        elif code == 126:
            why = f'exec: "{name}": permission denied'
        else:
            why = f'exec: "{name}": stat {name}: no such file or directory'
        raise ExecNotFound(_runtime_error(view, argv, why))
    try:
        code = fn(sh, [posixpath.basename(name)] + list(argv[1:]), io) & 0xFF
    except ShellExit as e:
        code = e.code & 0xFF
    return ProcessEnd(code, sh.elapsed, bool(sh.stopped))
