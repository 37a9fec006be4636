"""The server side of the Kubernetes remote-command stream protocol over WebSocket.

What an API server does for ``GET …/pods/<p>/exec?command=…`` with ``Upgrade: websocket``:
the RFC 6455 handshake with subprotocol negotiation, WebSocket framing, the channel byte in
front of every message (0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize; ``v5`` adds
255 = "close channel N"), and the final ``Status`` on channel 3 from which kubectl, client-go
and the Python client take the command's exit code.

It works on any connected socket (plain or TLS) whose request line and headers the caller has
already read: :func:`serve_exec` answers ``101 Switching Protocols``, runs
``run(stdin, stdout, stderr) -> exit code`` on the calling thread while a reader thread
demultiplexes the client's frames, then ends the session the way the API server's stream
translator does (status, close frame, wait for the client's close).

Behaviour checked against kubernetes' ``wsstream`` (server) and client-go's ``remotecommand``
WebSocket executor (client); nothing here is copied from them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Union
from urllib.parse import parse_qs

# RFC 6455 section 1.3: the fixed GUID appended to the client's key.
_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
V4_BASE64 = "v4.base64.channel.k8s.io"
V1 = "channel.k8s.io"
V1_BASE64 = "base64.channel.k8s.io"
# What this server accepts. The kubelet's WebSocket server speaks the four v1/v4 names (and an
# empty subprotocol, meaning v1); the API server's stream translator (kubectl >= 1.30) speaks v5.
# The client's order of preference wins, as in wsstream's handshake.
SUPPORTED_PROTOCOLS: tuple[str, ...] = (V5, V4, V4_BASE64, V1, V1_BASE64)

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE_SIGNAL = 255  # v5: a message [255, n] half-closes channel n

# Opcodes (RFC 6455 section 5.2).
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
CLOSE_NORMAL, CLOSE_PROTOCOL_ERROR, CLOSE_TOO_BIG = 1000, 1002, 1009

MAX_MESSAGE = 16 * 1024 * 1024  # a client message larger than this ends the session (1009)
_CHUNK = 32 * 1024  # outgoing data is cut into messages of at most this many bytes


# -- the request ------------------------------------------------------------------------------
_TRUE = ("true", "1", "yes")  # kubectl sends "true", the Python client "True"


@dataclass(frozen=True)
class ExecOptions:
    """The exec request's query: ``command`` (repeated), ``container``, ``stdin``, ``stdout``,
    ``stderr``, ``tty``. Which output channels exist depends on these (like the API server's
    ``createChannels``: an unrequested channel's data is dropped)."""

    command: tuple[str, ...] = ()
    container: Optional[str] = None
    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False

    @classmethod
    def from_query(cls, query: Union[str, Mapping[str, Sequence[str]]]) -> ExecOptions:
        """From the raw query string (``a=1&command=sh&command=-c``) or a ``parse_qs`` result.
        A dict of single values would lose all but one ``command``, so none is accepted."""
        q = parse_qs(query, keep_blank_values=True) if isinstance(query, str) else query

        def flag(name: str) -> bool:
            values = q.get(name) or []
            return bool(values) and values[-1].strip().lower() in _TRUE

        containers = q.get("container") or [""]
        container = containers[-1] or None
        return cls(command=tuple(q.get("command") or ()), container=container, stdin=flag("stdin"),
                   stdout=flag("stdout"), stderr=flag("stderr"), tty=flag("tty"))


class HandshakeError(Exception):
    """The request cannot be upgraded; nothing has been written to the connection. The caller
    answers with its own error response (:meth:`status` is the Kubernetes ``Status`` body,
    :func:`error_response` a complete HTTP answer)."""

    def __init__(self, code: int, reason: str, message: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.headers = tuple(headers)

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


_HTTP_REASONS = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 426: "Upgrade Required"}


def error_response(err: HandshakeError) -> bytes:
    """A complete ``HTTP/1.1`` answer carrying ``err``'s Status (the connection closes after it)."""
    body = json.dumps(err.status()).encode()
    head = [f"HTTP/1.1 {err.code} {_HTTP_REASONS.get(err.code, 'Error')}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: close", *[f"{k}: {v}" for k, v in err.headers]]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _header(headers: Mapping[str, str], name: str) -> str:
    # The twin's server lower-cases header names; accept any case from other callers.
    if name in headers:
        return headers[name]
    low = name.lower()
    for k, v in headers.items():
        if k.lower() == low:
            return v
    return ""


def _tokens(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


def is_websocket_upgrade(headers: Mapping[str, str]) -> bool:
    """``Upgrade: websocket`` with ``upgrade`` among the Connection tokens (wsstream's test)."""
    return (_header(headers, "upgrade").strip().lower() == "websocket"
            and "upgrade" in [t.lower() for t in _tokens(_header(headers, "connection"))])


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a ``Sec-WebSocket-Key`` (RFC 6455 section 4.2.2)."""
    return base64.b64encode(hashlib.sha1((key.strip() + _WS_GUID).encode("ascii")).digest()).decode("ascii")


def negotiate(headers: Mapping[str, str], method: str = "GET",
              supported: Sequence[str] = SUPPORTED_PROTOCOLS) -> str:
    """The subprotocol to answer with, or :class:`HandshakeError`. The first protocol in the
    client's list that this server speaks wins; a client that offers none gets ``""`` (v1)."""
    if not is_websocket_upgrade(headers):
        spdy = _header(headers, "upgrade").lower().startswith("spdy")
        raise HandshakeError(400, "BadRequest",
                             "Upgrade request required: this server streams exec over WebSocket only "
                             f"({', '.join(supported)})" + ("; SPDY is not supported: kubectl 1.30 and later use "
                                                                 "WebSocket (1.29 with KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true)"
                                                                 if spdy else ""))
    if method.upper() != "GET":
        raise HandshakeError(405, "MethodNotAllowed", "a WebSocket upgrade must be a GET request")
    if _header(headers, "sec-websocket-version").strip() != "13":
        raise HandshakeError(400, "BadRequest", "unsupported Sec-WebSocket-Version (this server speaks 13)",
                             headers=[("Sec-WebSocket-Version", "13")])
    key = _header(headers, "sec-websocket-key").strip()
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError(key)
    except ValueError:
        raise HandshakeError(400, "BadRequest", "missing or malformed Sec-WebSocket-Key") from None
    offered = _tokens(_header(headers, "sec-websocket-protocol")) or [""]
    for proto in offered:
        if proto == "" or proto in supported:
            return proto
    raise HandshakeError(400, "BadRequest", f"requested protocol(s) are not supported: {offered}; "
                                            f"supports {list(supported)}")


def handshake_response(headers: Mapping[str, str], protocol: str) -> bytes:
    lines = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Accept: {accept_key(_header(headers, 'sec-websocket-key'))}"]
    if protocol:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# -- final status -------------------------------------------------------------------------------
class ExecFailure(Exception):
    """Raised by ``run`` when the process could not be started at all (e.g. the executable is
    not in the image): the client gets an ``InternalError`` Status, as from the container
    runtime, and kubectl prints the message and exits 1."""


def exit_status(code: int) -> dict[str, Any]:
    """The Status the API server sends on channel 3 when the process exits with ``code``. The
    message is the one the stream translator builds from client-go's ``CodeExitError``; clients
    only read the ``ExitCode`` cause (an unsigned byte: 0..255)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: command terminated with exit code {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def internal_error_status(message: str) -> dict[str, Any]:
    """``apierrors.NewInternalError``'s shape."""
    return {"metadata": {}, "status": "Failure", "message": f"Internal error occurred: {message}",
            "reason": "InternalError", "details": {"causes": [{"message": message}]}, "code": 500}


# -- framing ------------------------------------------------------------------------------------
class ProtocolError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True, mask: Optional[bytes] = None) -> bytes:
    """One WebSocket frame. Servers send unmasked frames; ``mask`` is for test clients."""
    head = bytearray([(0x80 if fin else 0) | opcode])
    n = len(payload)
    mbit = 0x80 if mask is not None else 0
    if n < 126:
        head.append(mbit | n)
    elif n < 1 << 16:
        head.append(mbit | 126)
        head += struct.pack("!H", n)
    else:
        head.append(mbit | 127)
        head += struct.pack("!Q", n)
    if mask is None:
        return bytes(head) + payload
    return bytes(head) + mask + _unmask(payload, mask)


def _unmask(data: bytes, mask: bytes) -> bytes:
    if not data:
        return data
    # XOR with the repeated 4-byte key, done on one big integer instead of byte by byte.
    key = (mask * (len(data) // 4 + 1))[: len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(len(data), "big")


class _Reader(Protocol):
    def read(self, n: int) -> bytes: ...


class _SocketReader:
    """``read(n)`` that returns exactly n bytes or fewer only at end of stream."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def read(self, n: int) -> bytes:
        parts: list[bytes] = []
        while n > 0:
            chunk = self._sock.recv(min(n, 65536))
            if not chunk:
                break
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)


def read_frame(reader: _Reader, *, require_mask: bool = True,
               max_size: int = MAX_MESSAGE) -> Optional[tuple[bool, int, bytes]]:
    """``(fin, opcode, payload)`` of the next frame, or None at end of stream."""
    head = reader.read(2)
    if len(head) < 2:
        return None
    b0, b1 = head[0], head[1]
    if b0 & 0x70:
        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "reserved bits set (no extension was negotiated)")
    fin, opcode, masked, n = bool(b0 & 0x80), b0 & 0x0F, bool(b1 & 0x80), b1 & 0x7F
    if n == 126:
        ext = reader.read(2)
        if len(ext) < 2:
            return None
        n = struct.unpack("!H", ext)[0]
    elif n == 127:
        ext = reader.read(8)
        if len(ext) < 8:
            return None
        n = struct.unpack("!Q", ext)[0]
    if opcode >= 0x8 and (n > 125 or not fin):
        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "control frames must be short and unfragmented")
    if masked != require_mask:
        # RFC 6455 5.1: a server must fail the connection on an unmasked client frame.
        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "client frames must be masked" if require_mask
                            else "server frames must not be masked")
    if n > max_size:
        raise ProtocolError(CLOSE_TOO_BIG, f"message of {n} bytes is too big")
    mask = reader.read(4) if masked else b""
    if masked and len(mask) < 4:
        return None
    payload = reader.read(n) if n else b""
    if len(payload) < n:
        return None
    return fin, opcode, _unmask(payload, mask) if masked else payload


class MessageReader:
    """Reassembles fragmented messages; hands control frames to ``on_control`` as they come
    (they may arrive between the fragments of a message)."""

    def __init__(self, reader: _Reader, on_control: Callable[[int, bytes], None], *,
                 require_mask: bool = True, max_size: int = MAX_MESSAGE) -> None:
        self._reader = reader
        self._on_control = on_control
        self._require_mask = require_mask
        self._max = max_size

    def next(self) -> Optional[tuple[int, bytes]]:
        """``(OP_TEXT|OP_BINARY, data)`` or ``(OP_CLOSE, payload)``; None at end of stream."""
        opcode: Optional[int] = None
        parts: list[bytes] = []
        size = 0
        while True:
            frame = read_frame(self._reader, require_mask=self._require_mask, max_size=self._max)
            if frame is None:
                return None
            fin, op, payload = frame
            if op == OP_CLOSE:
                return OP_CLOSE, payload
            if op in (OP_PING, OP_PONG):
                self._on_control(op, payload)
                continue
            if op == OP_CONT:
                if opcode is None:
                    raise ProtocolError(CLOSE_PROTOCOL_ERROR, "continuation frame without a message")
            elif op in (OP_TEXT, OP_BINARY):
                if opcode is not None:
                    raise ProtocolError(CLOSE_PROTOCOL_ERROR, "new message inside a fragmented one")
                opcode = op
            else:
                raise ProtocolError(CLOSE_PROTOCOL_ERROR, f"unknown opcode {op}")
            size += len(payload)
            if size > self._max:
                raise ProtocolError(CLOSE_TOO_BIG, "message too big")
            parts.append(payload)
            if fin:
                return opcode, b"".join(parts)


# -- the streams `run` sees -------------------------------------------------------------------
class InputStream:
    """The client's stdin: filled by the connection's reader thread, read by ``run``. Reads
    block until data or end of input (the client's v5 close signal for channel 0, or the
    connection ending); a stream the client did not request is at its end from the start."""

    def __init__(self, open_: bool = True) -> None:
        self._buf = bytearray()
        self._eof = not open_
        self._cond = threading.Condition()
        self.received = 0

    def feed(self, data: bytes) -> None:
        with self._cond:
            if self._eof:
                return
            self._buf += data
            self.received += len(data)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    @property
    def at_eof(self) -> bool:
        with self._cond:
            return self._eof and not self._buf

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all until EOF for ``n < 0``) once that many or EOF are there."""
        with self._cond:
            while not self._eof and (n < 0 or len(self._buf) < n):
                self._cond.wait()
            return self._take(len(self._buf) if n < 0 else min(n, len(self._buf)))

    def read1(self, n: int = 65536) -> bytes:
        """Whatever is there (at most ``n``), waiting only while nothing is."""
        with self._cond:
            while not self._eof and not self._buf:
                self._cond.wait()
            return self._take(min(n, len(self._buf)))

    def readline(self, ends: bytes = b"\n") -> bytes:
        """Up to and including the first byte of ``ends`` (a tty sends CR for Enter), or the
        rest at EOF."""
        with self._cond:
            while True:
                idx = min((i for i in (self._buf.find(bytes([c])) for c in ends) if i >= 0), default=-1)
                if idx >= 0:
                    return self._take(idx + 1)
                if self._eof:
                    return self._take(len(self._buf))
                self._cond.wait()

    def _take(self, n: int) -> bytes:
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


class OutputStream:
    """One output channel (stdout or stderr). Writes after the connection broke, or to a channel
    the client did not request, are dropped, as the API server drops them."""

    def __init__(self, send: Callable[[int, bytes], bool], channel: int, enabled: bool, *, onlcr: bool = False) -> None:
        self._send = send
        self.channel = channel
        self.enabled = enabled
        self._onlcr = onlcr  # a pty turns "\n" into "\r\n" (termios ONLCR)
        self.written = 0

    def write(self, data: Union[bytes, str]) -> int:
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
        if self._onlcr:
            raw = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        if self.enabled and raw:
            self.written += len(raw)
            for i in range(0, len(raw), _CHUNK):
                if not self._send(self.channel, raw[i:i + _CHUNK]):
                    break
        return len(data)

    def flush(self) -> None:
        pass


RunFn = Callable[[InputStream, OutputStream, OutputStream], int]


@dataclass(frozen=True)
class TerminalSize:
    width: int
    height: int


@dataclass
class ExecResult:
    """What happened, for the caller's record. ``exit_code`` is None when ``run`` raised."""

    protocol: str
    options: ExecOptions
    exit_code: Optional[int] = None
    status: dict[str, Any] = field(default_factory=dict)
    stdin_bytes: int = 0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    resizes: list[TerminalSize] = field(default_factory=list)
    client_closed_first: bool = False  # the client ended the session before the command did
    error: Optional[str] = None


class _Session:
    """One upgraded connection: the write side (any thread, under a lock) and the reader thread."""

    def __init__(self, sock: Any, reader: _Reader, protocol: str, opts: ExecOptions,
                 on_resize: Optional[Callable[[TerminalSize], None]]) -> None:
        self.sock = sock
        self.protocol = protocol
        self.base64 = "base64" in protocol
        self.opts = opts
        self.stdin = InputStream(open_=opts.stdin)
        self._reader = MessageReader(reader, self._control)
        self._wlock = threading.Lock()
        self._close_sent = False
        self.peer_closed = threading.Event()
        self.broken = False
        self.resizes: list[TerminalSize] = []
        self._resize_buf = b""
        self._on_resize = on_resize
        self.thread = threading.Thread(target=self._read_loop, name="exec-ws-reader", daemon=True)

    # writes --------------------------------------------------------------------------------
    def _raw_send(self, frame: bytes) -> bool:
        try:
            self.sock.sendall(frame)
            return True
        except OSError:
            self.broken = True
            return False

    def send_channel(self, channel: int, data: bytes) -> bool:
        if self.base64:
            message = bytes([48 + channel]) + base64.b64encode(data)
            opcode = OP_TEXT
        else:
            # client-go's reader rejects text messages: always binary in the raw protocols.
            message = bytes([channel]) + data
            opcode = OP_BINARY
        with self._wlock:
            if self._close_sent or self.broken:
                return False
            return self._raw_send(encode_frame(opcode, message))

    def send_control(self, opcode: int, payload: bytes = b"") -> None:
        with self._wlock:
            if self._close_sent or self.broken:
                return
            if opcode == OP_CLOSE:
                self._close_sent = True
            self._raw_send(encode_frame(opcode, payload))

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        self.send_control(OP_CLOSE, struct.pack("!H", code) + reason.encode()[:120])

    # reads ---------------------------------------------------------------------------------
    def _control(self, opcode: int, payload: bytes) -> None:
        if opcode == OP_PING:  # client-go pings every 5 s and gives up after 12 missed pongs
            self.send_control(OP_PONG, payload)

    def _read_loop(self) -> None:
        try:
            while True:
                msg = self._reader.next()
                if msg is None:
                    break
                opcode, data = msg
                if opcode == OP_CLOSE:
                    self.close()  # echo the close (RFC 6455 5.5.1); no data frames after it
                    break
                self._message(opcode, data)
        except ProtocolError as e:
            self.close(e.code, str(e))
        except (OSError, ValueError):
            pass
        finally:
            self.peer_closed.set()
            self.stdin.close()

    def _message(self, opcode: int, data: bytes) -> None:
        if not data:
            return
        channel, payload = data[0], data[1:]
        if self.base64:
            channel -= 48  # the channel is an ASCII digit, the payload base64
            try:
                payload = base64.b64decode(payload)
            except ValueError:
                return
        elif channel == CLOSE_SIGNAL and self.protocol == V5:
            if payload[:1] == bytes([STDIN]):
                self.stdin.close()
            return
        if channel == STDIN:
            self.stdin.feed(payload)
        elif channel == RESIZE:
            self._resize(payload)
        # other channels are the server's to write: ignored, as wsstream ignores them

    def _resize(self, payload: bytes) -> None:
        # A stream of JSON objects {"Width": w, "Height": h}, not necessarily one per message.
        self._resize_buf += payload
        text = self._resize_buf.decode("utf-8", "replace")
        decoder = json.JSONDecoder()
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                break
            try:
                obj, pos = decoder.raw_decode(text, pos)
            except ValueError:
                break
            if isinstance(obj, dict):
                size = TerminalSize(int(obj.get("Width") or 0), int(obj.get("Height") or 0))
                self.resizes.append(size)
                if self._on_resize is not None:
                    self._on_resize(size)
        self._resize_buf = text[pos:].encode()


def serve_exec(conn: Any, headers: Mapping[str, str], run: RunFn, *, method: str = "GET",
               options: Optional[ExecOptions] = None, query: Optional[str] = None,
               reader: Optional[_Reader] = None, linger: float = 10.0,
               on_resize: Optional[Callable[[TerminalSize], None]] = None,
               supported: Sequence[str] = SUPPORTED_PROTOCOLS) -> ExecResult:
    """Upgrade ``conn`` (a connected socket, plain or TLS, whose request head was read) and run
    one exec session on it.

    ``headers``: the request headers (any case). ``options`` or ``query``: the exec parameters.
    ``reader``: where the client's bytes come from if the caller reads the socket through a
    buffered file (bytes it already buffered would be lost otherwise); default ``conn.recv``.
    ``run(stdin, stdout, stderr)`` returns the exit code (taken modulo 256) or raises
    :class:`ExecFailure`; with ``tty`` its stderr goes to the stdout channel, as on a pty.

    Raises :class:`HandshakeError` before writing anything if the request cannot be upgraded.
    Afterwards it returns once the session ended; the caller then closes the connection (it is
    of no further use for HTTP)."""
    if options is None:
        options = ExecOptions.from_query(query or "")
    protocol = negotiate(headers, method, supported)
    conn.sendall(handshake_response(headers, protocol))
    s = _Session(conn, reader if reader is not None else _SocketReader(conn), protocol, options, on_resize)
    s.thread.start()
    result = ExecResult(protocol=protocol, options=options)
    # As the API server does: an empty message on the lowest writable channel tells the client
    # the streams are up.
    first = STDOUT if options.stdout else STDERR if options.stderr else ERROR
    s.send_channel(first, b"")
    stdout = OutputStream(s.send_channel, STDOUT, options.stdout, onlcr=options.tty)
    stderr = (OutputStream(s.send_channel, STDOUT, options.stdout, onlcr=True) if options.tty
              else OutputStream(s.send_channel, STDERR, options.stderr))
    try:
        code = int(run(s.stdin, stdout, stderr)) & 0xFF
        result.exit_code = code
        result.status = exit_status(code)
    except ExecFailure as e:
        result.error = str(e)
        result.status = internal_error_status(str(e))
    except Exception as e:  # a bug in run must not hang the client: report it as the runtime would
        result.error = f"{type(e).__name__}: {e}"
        result.status = internal_error_status(f"error executing command in container: {e}")
    result.client_closed_first = s.peer_closed.is_set()
    status = result.status
    if protocol in (V1, V1_BASE64, ""):
        # Before v4 the error channel carries the failure's message as text, nothing on success.
        if status.get("status") != "Success":
            s.send_channel(ERROR, str(status.get("message", "")).encode())
    else:
        s.send_channel(ERROR, json.dumps(status, separators=(",", ":")).encode())
    # Like the stream translator's finish(): close frame, then wait for the client's close so
    # that output still in flight is not reset away.
    s.close()
    s.peer_closed.wait(linger)
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.thread.join(1.0)
    result.stdin_bytes = s.stdin.received
    result.stdout_bytes, result.stderr_bytes = stdout.written, stderr.written
    result.resizes = list(s.resizes)
    return result
