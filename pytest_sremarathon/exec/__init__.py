"""``kubectl exec`` into a simulated container: the remote-command stream protocol over
WebSocket (:mod:`.channels`) and a small busybox-like shell (:mod:`.shell`) over what the twin
shows of a container (:mod:`.view`). Self-contained: the twin's API server calls
:func:`serve_exec` with a :class:`ContainerView` of the pod's container; docs/EXEC.md has the
contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from .channels import (
    SUPPORTED_PROTOCOLS,
    ExecFailure,
    ExecOptions,
    ExecResult,
    HandshakeError,
    InputStream,
    OutputStream,
    RunFn,
    error_response,
    is_websocket_upgrade,
    negotiate,
    serve_exec,
)
from .run import ExecNotFound, ProcessEnd, run_exec, run_process
from .view import ContainerView, HttpRequest, HttpResponse, NetworkError, Process, StaticContainer

__all__ = ["SUPPORTED_PROTOCOLS", "ContainerView", "ExecFailure", "ExecNotFound", "ExecOptions", "ExecResult",
           "HandshakeError", "HttpRequest", "HttpResponse", "InputStream", "NetworkError", "OutputStream",
           "Process", "ProcessEnd", "RunFn", "StaticContainer", "error_response", "exec_in_container",
           "is_websocket_upgrade", "negotiate", "run_exec", "run_process", "serve_exec", "shell_runner"]


def shell_runner(view: ContainerView, options: ExecOptions) -> RunFn:
    """The ``run`` for :func:`serve_exec` that executes ``options.command`` in ``view``."""

    def run(stdin: InputStream, stdout: OutputStream, stderr: OutputStream) -> int:
        return run_exec(view, options.command, stdin, stdout, stderr, tty=options.tty)

    return run


def exec_in_container(conn: Any, headers: Mapping[str, str], query: str, view: ContainerView, *,
                      reader: Optional[Any] = None, method: str = "GET") -> ExecResult:
    """One exec end to end: parse the query, upgrade, run the shell, report the exit status.
    Raises :class:`HandshakeError` (nothing written) when the request cannot be upgraded."""
    options = ExecOptions.from_query(query)
    return serve_exec(conn, headers, shell_runner(view, options), method=method, options=options, reader=reader)
