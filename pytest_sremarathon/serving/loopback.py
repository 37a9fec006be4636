"""A loopback HTTP/1.1 server that speaks plain HTTP and TLS on one port: the twin API server
and the policy proxy in front of a real cluster. It owns the socket, one thread per
connection, keep-alive and request framing, and what clients need to reach it (URLs, the CA,
kubeconfigs); a subclass answers one request at a time in :meth:`LoopbackServer._respond`."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from . import tls


class _Pass:
    def __enter__(self) -> _Pass:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def release(self) -> None:
        pass


_PASS = _Pass()


def no_gate(actor: Optional[str], method: str, path: str) -> Any:
    """The default request gate: every request is served at once."""
    return _PASS


class LoopbackServer:
    """Subclasses call ``__init__`` and implement ``_respond``; ``tokens`` (token -> actor)
    name the users of the kubeconfigs it writes.

    ``gate(actor, method, path)`` is entered around serving each authenticated request and
    returns a context manager with ``release()`` (a stream releases it once its first answer is
    out): the marathon's think-time coordinator (``thinktime.StepClock.gate``) charges and
    serialises the agent's requests there."""

    tokens: dict[str, str]
    gate: Callable[[Optional[str], str, str], Any] = staticmethod(no_gate)

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name = name  # for thread names
        self.host = host
        self._port = port
        self._sock: Optional[socket.socket] = None
        self._accept_thread: Optional[threading.Thread] = None
        self._stopping = threading.Event()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._tls = tls.credentials()
        self._ssl = tls.server_context(self._tls)

    # -- what clients need -----------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """Plain-HTTP base URL (for in-process and extension clients that set the header themselves)."""
        return f"http://{self.host}:{self._port}"

    @property
    def https_url(self) -> str:
        """The same port spoken over TLS; what kubeconfigs point at (kubectl only sends tokens over TLS)."""
        return f"https://{self.host}:{self._port}"

    @property
    def ca_pem(self) -> bytes:
        """PEM of the CA that signed the server certificate."""
        return self._tls.ca_pem

    def write_kubeconfig(self, path: Path, token: str, *, context: str = "sremarathon") -> Path:
        return tls.write_kubeconfig(path, server=self.https_url, ca_pem=self._tls.ca_pem, token=token,
                                    user=f"{context}-{self.tokens.get(token, 'user')}", context=context)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> LoopbackServer:
        if self._sock is not None:
            return self
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        sock.listen(256)
        self._port = sock.getsockname()[1]
        self._sock = sock
        self._stopping.clear()
        self._accept_thread = threading.Thread(target=self._accept_loop, name=f"{self.name}:{self._port}",
                                               daemon=True)
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        if self._sock is None:
            return
        self._stopping.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._wake_streams()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5)
        self._sock = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _wake_streams(self) -> None:
        """Let long-running answers (watches) notice that the server stops."""

    # -- connections -----------------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                break
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._conns_lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve_connection, args=(conn,), daemon=True,
                             name=f"{self.name}-conn:{self._port}").start()

    def _serve_connection(self, raw: socket.socket) -> None:
        conn: Any = raw
        rfile = None
        try:
            raw.settimeout(30)
            if raw.recv(1, socket.MSG_PEEK) == b"\x16":  # a TLS ClientHello: the same port speaks HTTPS
                conn = self._ssl.wrap_socket(raw, server_side=True)
            conn.settimeout(None)
            rfile = conn.makefile("rb", buffering=65536)
            while not self._stopping.is_set():
                line = rfile.readline(65537)
                if not line:
                    break
                if line in (b"\r\n", b"\n"):
                    continue
                try:
                    method, target, version = line.decode("latin-1").split()
                except ValueError:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    break
                headers: dict[str, str] = {}
                while True:
                    h = rfile.readline(65537)
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = _read_body(rfile, headers)
                conn_hdr = headers.get("connection", "").lower()
                keep_alive = (version == "HTTP/1.1" and conn_hdr != "close") or conn_hdr == "keep-alive"
                if not self._respond(conn, method, target, headers, body, keep_alive):
                    break
        except (OSError, ValueError, ssl.SSLError, http.client.HTTPException):
            pass
        finally:
            with self._conns_lock:
                self._conns.discard(raw)
            try:
                if rfile is not None:
                    rfile.close()
                conn.close()
            except OSError:
                pass

    def _respond(self, conn: Any, method: str, target: str, headers: dict[str, str], body: bytes,
                 keep_alive: bool) -> bool:
        """Answer one request on ``conn``; whether to read another one from it."""
        raise NotImplementedError


def _read_body(rfile: Any, headers: dict[str, str]) -> bytes:
    if "content-length" in headers:
        n = int(headers["content-length"] or 0)
        return rfile.read(n) if n else b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
            chunks.append(rfile.read(size))
            rfile.readline()
        return b"".join(chunks)
    return b""
