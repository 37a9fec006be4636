"""The remote-command WebSocket protocol over loopback: a raw RFC 6455 client for the framing
details, and the official Python client (``kubernetes.stream``) as a real one."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from typing import Optional

import pytest
from kubernetes import client
from kubernetes.stream import stream
from support.exec_server import ExecTestServer

from pytest_sremarathon.exec import channels
from pytest_sremarathon.exec.channels import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    ExecOptions,
    HandshakeError,
    accept_key,
    encode_frame,
    negotiate,
    read_frame,
)

EXEC = "/api/v1/namespaces/default/pods/p/exec"


class RawClient:
    """Speaks WebSocket by hand (masked frames), to see exactly what the server sends."""

    def __init__(self, server: ExecTestServer, query: str, protocols: Optional[str] = "v5.channel.k8s.io",
                 extra: str = "", version: str = "13") -> None:
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        self.key = base64.b64encode(os.urandom(16)).decode()
        head = (f"GET {EXEC}?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {self.key}\r\nSec-WebSocket-Version: {version}\r\n")
        if protocols is not None:
            head += f"Sec-WebSocket-Protocol: {protocols}\r\n"
        self.sock.sendall((head + extra + "\r\n").encode())
        self.rfile = self.sock.makefile("rb")
        self.status_line = self.rfile.readline().decode().strip()
        self.headers: dict[str, str] = {}
        while True:
            line = self.rfile.readline().decode()
            if line in ("\r\n", "\n", ""):
                break
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()

    def send(self, opcode: int, payload: bytes, fin: bool = True, masked: bool = True) -> None:
        self.sock.sendall(encode_frame(opcode, payload, fin=fin, mask=b"\x11\x22\x33\x44" if masked else None))

    def frames(self) -> list[tuple[int, bytes]]:
        """Every frame until the server's close (answered), as (opcode, payload)."""
        out: list[tuple[int, bytes]] = []
        while True:
            frame = read_frame(self.rfile, require_mask=False)
            if frame is None:
                return out
            _, op, payload = frame
            out.append((op, payload))
            if op == OP_CLOSE:
                self.send(OP_CLOSE, payload[:2])
                return out

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()


def channel_data(frames: list[tuple[int, bytes]], b64: bool = False) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for op, payload in frames:
        if op in (OP_BINARY, OP_TEXT) and payload:
            ch, data = payload[0], payload[1:]
            if b64:
                ch, data = ch - 48, base64.b64decode(data)
            out[ch] = out.get(ch, b"") + data
    return out


def test_accept_key_is_rfc6455s() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_exec_options_from_query() -> None:
    o = ExecOptions.from_query("command=sh&command=-c&command=echo+a%26b&container=app&stdin=True&stdout=true&tty=false")
    assert o == ExecOptions(("sh", "-c", "echo a&b"), "app", stdin=True, stdout=True, stderr=False, tty=False)


@pytest.mark.parametrize("offered, chosen", [
    ("v5.channel.k8s.io", "v5.channel.k8s.io"),
    ("v5.channel.k8s.io, v4.channel.k8s.io", "v5.channel.k8s.io"),
    ("v4.channel.k8s.io,v5.channel.k8s.io", "v4.channel.k8s.io"),  # the client's order wins
    ("v3.channel.k8s.io, v4.base64.channel.k8s.io", "v4.base64.channel.k8s.io"),
    ("channel.k8s.io", "channel.k8s.io"),
    (None, ""),
])
def test_negotiation(offered: Optional[str], chosen: str) -> None:
    headers = {"upgrade": "websocket", "connection": "keep-alive, Upgrade", "sec-websocket-version": "13",
               "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="}
    if offered is not None:
        headers["sec-websocket-protocol"] = offered
    assert negotiate(headers) == chosen


@pytest.mark.parametrize("headers, code, words", [
    ({}, 400, "Upgrade request required"),
    ({"upgrade": "SPDY/3.1", "connection": "Upgrade"}, 400, "SPDY is not supported"),
    ({"upgrade": "websocket", "connection": "Upgrade", "sec-websocket-version": "8",
      "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="}, 400, "Sec-WebSocket-Version"),
    ({"upgrade": "websocket", "connection": "Upgrade", "sec-websocket-version": "13",
      "sec-websocket-key": "short"}, 400, "Sec-WebSocket-Key"),
    ({"upgrade": "websocket", "connection": "Upgrade", "sec-websocket-version": "13",
      "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-protocol": "v3.channel.k8s.io"},
     400, "not supported"),
])
def test_handshake_errors(headers: dict[str, str], code: int, words: str) -> None:
    with pytest.raises(HandshakeError) as e:
        negotiate(headers)
    assert e.value.code == code and words in e.value.message
    assert e.value.status()["reason"] in ("BadRequest", "MethodNotAllowed")


def test_handshake_error_is_an_http_answer(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=true&stdout=true", protocols="v3.channel.k8s.io")
    assert c.status_line.startswith("HTTP/1.1 400")
    body = json.loads(c.rfile.read(int(c.headers["content-length"])))
    assert body["kind"] == "Status" and body["reason"] == "BadRequest"
    c.close()


def test_v5_session_frames(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=sh&command=-c&command=echo+out%3B+echo+err+%3E%262%3B+exit+3"
                               "&stdout=true&stderr=true")
    assert c.status_line == "HTTP/1.1 101 Switching Protocols"
    assert c.headers["sec-websocket-accept"] == accept_key(c.key)
    assert c.headers["sec-websocket-protocol"] == "v5.channel.k8s.io"
    frames = c.frames()
    # all binary (client-go rejects text messages), the first an empty stdout message
    assert frames[0] == (OP_BINARY, b"\x01")
    assert all(op == OP_BINARY for op, _ in frames[:-1]) and frames[-1][0] == OP_CLOSE
    assert struct.unpack("!H", frames[-1][1][:2])[0] == 1000
    data = channel_data(frames)
    assert data[1] == b"out\n" and data[2] == b"err\n"
    assert json.loads(data[3]) == {
        "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
        "message": "command terminated with non-zero exit code: command terminated with exit code 3",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}}
    c.close()
    assert exec_server.last_result().exit_code == 3


def test_success_status(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=true&stdout=true")
    assert json.loads(channel_data(c.frames())[3]) == {"metadata": {}, "status": "Success"}
    c.close()


def test_stdin_fragmented_text_and_binary_with_pings_and_close_signal(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=cat&stdin=true&stdout=true&stderr=true")
    c.send(OP_BINARY, b"\x00hel", fin=False)
    c.send(OP_PING, b"beat")  # a control frame between fragments
    c.send(0x0, b"lo ", fin=True)
    c.send(OP_TEXT, b"\x00world\n")  # the Python client sends str data as text frames
    c.send(OP_BINARY, bytes([255, 0]))  # v5: stdin is closed
    frames = c.frames()
    assert (OP_PONG, b"beat") in frames
    data = channel_data(frames)
    assert data[1] == b"hello world\n"
    assert json.loads(data[3])["status"] == "Success"
    c.close()


def test_v4_stdin_ends_with_the_connection(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=sh&stdin=true&stdout=true", protocols="v4.channel.k8s.io")
    assert c.headers["sec-websocket-protocol"] == "v4.channel.k8s.io"
    c.send(OP_BINARY, b"\x00echo one\nexit 9\n")
    data = channel_data(c.frames())
    assert data[1] == b"one\n" and json.loads(data[3])["details"]["causes"][0]["message"] == "9"
    c.close()


@pytest.mark.parametrize("proto", ["v4.base64.channel.k8s.io", "base64.channel.k8s.io"])
def test_base64_variants(exec_server: ExecTestServer, proto: str) -> None:
    c = RawClient(exec_server, "command=sh&stdin=true&stdout=true&stderr=true", protocols=proto)
    c.send(OP_TEXT, b"0" + base64.b64encode(b"echo hi; echo oops >&2; exit 2\n"))
    frames = c.frames()
    assert all(op == OP_TEXT for op, _ in frames[:-1])
    data = channel_data(frames, b64=True)
    assert data[1] == b"hi\n" and data[2] == b"oops\n"
    if proto.startswith("v4"):
        assert json.loads(data[3])["reason"] == "NonZeroExitCode"
    else:  # before v4 the error channel carries the message as text
        assert data[3] == b"command terminated with non-zero exit code: command terminated with exit code 2"
    c.close()


def test_v1_success_sends_no_error_message(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=echo&command=x&stdout=true", protocols="channel.k8s.io")
    data = channel_data(c.frames())
    assert data == {1: b"x\n"}
    c.close()


def test_unmasked_client_frame_fails_the_connection(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=cat&stdin=true&stdout=true")
    c.send(OP_BINARY, b"\x00data", masked=False)
    frames = c.frames()
    assert frames[-1][0] == OP_CLOSE and struct.unpack("!H", frames[-1][1][:2])[0] == 1002
    c.close()


def test_resize_events_are_decoded(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=sh&stdin=true&stdout=true&tty=true")
    c.send(OP_BINARY, b'\x04{"Width":80,"Height":24}{"Width":1')
    c.send(OP_BINARY, b'\x0420,"Height":40}')
    c.send(OP_BINARY, b"\x00exit\r")
    data = channel_data(c.frames())
    assert data[1].startswith(b"/ # exit\r\n")  # a tty: echo and CRLF
    c.close()
    sizes = exec_server.last_result().resizes
    assert [(s.width, s.height) for s in sizes] == [(80, 24), (120, 40)]


def test_stderr_goes_to_stdout_on_a_tty(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=sh&command=-c&command=echo+e+%3E%262&stdout=true&tty=true")
    assert channel_data(c.frames())[1] == b"e\r\n"
    c.close()


def test_client_that_goes_away_does_not_hang_the_server(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=sh&stdin=true&stdout=true")
    c.send(OP_BINARY, b"\x00echo partial\n")
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    assert exec_server.last_result().client_closed_first


def test_large_output_is_chunked(exec_server: ExecTestServer) -> None:
    c = RawClient(exec_server, "command=sh&command=-c&command=seq+20000&stdout=true")
    frames = c.frames()
    data = channel_data(frames)
    assert data[1] == "".join(f"{i}\n" for i in range(1, 20001)).encode()
    assert max(len(p) for _, p in frames) <= channels._CHUNK + 1
    c.close()


# -- the official Python client -------------------------------------------------------------------
def api(server: ExecTestServer) -> client.CoreV1Api:
    cfg = client.Configuration()
    cfg.host = server.url
    return client.CoreV1Api(client.ApiClient(cfg))


@pytest.mark.parametrize("protocol", [None, "v4.channel.k8s.io"])
def test_python_client_exit_code_and_streams(exec_server: ExecTestServer, protocol: Optional[str]) -> None:
    extra = {"_headers": {"sec-websocket-protocol": protocol}} if protocol else {}
    resp = stream(api(exec_server).connect_get_namespaced_pod_exec, "p", "default",
                  command=["sh", "-c", "echo out; echo err >&2; exit 3"], stderr=True, stdin=False, stdout=True,
                  tty=False, _preload_content=False, **extra)
    resp.run_forever(timeout=10)
    assert resp.subprotocol == (protocol or "v5.channel.k8s.io")
    assert (resp.read_stdout(), resp.read_stderr(), resp.returncode) == ("out\n", "err\n", 3)


def test_python_client_preloaded(exec_server: ExecTestServer) -> None:
    out = stream(api(exec_server).connect_get_namespaced_pod_exec, "p", "default",
                 command=["sh", "-c", "cat /etc/config/app.yaml | grep port"], stderr=True, stdin=False,
                 stdout=True, tty=False)
    assert out == "port: 8080\n"


def test_python_client_interactive_stdin(exec_server: ExecTestServer) -> None:
    resp = stream(api(exec_server).connect_get_namespaced_pod_exec, "p", "default", command=["sh"],
                  stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
    resp.write_stdin("echo hello\n")
    resp.write_stdin(b"hostname\n")
    resp.write_stdin("exit 7\n")
    resp.run_forever(timeout=10)
    assert (resp.read_stdout(), resp.returncode) == ("hello\np\n", 7)


def test_python_client_stdin_close_ends_cat(exec_server: ExecTestServer) -> None:
    resp = stream(api(exec_server).connect_get_namespaced_pod_exec, "p", "default", command=["cat"],
                  stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
    resp.write_stdin("line\n")
    resp.close_channel(0)  # v5 only: [255, 0]
    resp.run_forever(timeout=10)
    assert (resp.read_stdout(), resp.returncode) == ("line\n", 0)


def test_python_client_missing_executable(exec_server: ExecTestServer) -> None:
    resp = stream(api(exec_server).connect_get_namespaced_pod_exec, "p", "default", command=["bash"],
                  stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    resp.run_forever(timeout=10)
    status = json.loads(resp.read_channel(3))
    assert status["reason"] == "InternalError" and status["code"] == 500
    assert 'exec: "bash": executable file not found in $PATH' in status["message"]
