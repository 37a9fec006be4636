"""Network applets over the container view's network: curl (curl 8), wget, nslookup and nc
(busybox), getent (musl). Failures map to the tools' exit codes: curl 6 (could not resolve),
7 (could not connect), 28 (timed out), 22 (``-f`` and a status >= 400), 56 (connection reset);
busybox wget exits 1 on every failure; nslookup and nc 1; getent 2 for a missing key."""

from __future__ import annotations

import ipaddress
import math
import posixpath
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Optional, Union
from urllib.parse import urljoin, urlsplit

from .shell import IO, FSError, Out, Shell, applet
from .view import HttpRequest, HttpResponse, NetworkError

CURL_VERSION = "8.5.0"
# A black hole (dropped SYNs) with no limit of the tool's own fails when the kernel gives up on
# the connect, after its SYN retries (tcp_syn_retries=6: about 127 s).
KERNEL_CONNECT_TIMEOUT = 127.0


def _reason(status: int, given: str = "") -> str:
    if given:
        return given
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


@dataclass
class _Target:
    url: str
    scheme: str
    host: str
    port: int
    path: str  # path and query

    @property
    def hostport(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def _target(url: str) -> Optional[_Target]:
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target(url, parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path)


def _resolve(sh: Shell, host: str) -> str:
    """The address of ``host`` or NetworkError('resolve'); a DNS outage raises 'timeout'."""
    if _is_ip(host):
        return host
    hosts = _etc_hosts(sh)
    if host in hosts:
        return hosts[host]
    ip = sh.view.resolve(host)
    if ip is None:
        raise NetworkError("resolve", f"could not resolve {host}")
    return ip


def _etc_hosts(sh: Shell) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        text = sh.files.read("/etc/hosts").decode("utf-8", "replace")
    except FSError:
        return out
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split()
        for name in parts[1:]:
            out.setdefault(name, parts[0])
    return out


# -- curl ---------------------------------------------------------------------------------------
_CURL_SHORT_VALUE = set("owXHmdAuetrTYyzKbc")
_CURL_LONG = {
    "--silent": "s", "--show-error": "S", "--fail": "f", "--fail-with-body": "F", "--verbose": "v",
    "--include": "i", "--head": "I", "--location": "L", "--insecure": "k", "--output": "o",
    "--write-out": "w", "--request": "X", "--header": "H", "--max-time": "m", "--data": "d",
    "--data-raw": "d", "--data-binary": "d", "--user-agent": "A", "--connect-timeout": "connect",
    "--retry": "retry", "--compressed": "", "--no-progress-meter": "np", "--http1.1": "", "-4": "", "-6": "",
    "--url": "url", "--user": "u", "--noproxy": "noproxy", "--retry-delay": "retry",
}
_CURL_LONG_VALUE = {"o", "w", "X", "H", "m", "d", "A", "connect", "retry", "url", "u", "noproxy"}


@dataclass
class _CurlOpts:
    silent: bool = False
    show_error: bool = False
    fail: bool = False
    fail_body: bool = False
    verbose: bool = False
    include: bool = False
    head: bool = False
    location: bool = False
    no_meter: bool = False
    output: Optional[str] = None
    write_out: Optional[str] = None
    method: Optional[str] = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    max_time: Optional[float] = None
    connect_timeout: Optional[float] = None
    data: Optional[str] = None
    agent: str = f"curl/{CURL_VERSION}"
    urls: list[str] = field(default_factory=list)


class _CurlError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _curl_opts(argv: list[str]) -> _CurlOpts:
    o = _CurlOpts()

    def apply(key: str, value: str) -> None:
        if key == "s":
            o.silent = True
        elif key == "S":
            o.show_error = True
        elif key == "f":
            o.fail = True
        elif key == "F":
            o.fail_body = True
        elif key == "v":
            o.verbose = True
        elif key == "i":
            o.include = True
        elif key == "I":
            o.head = True
        elif key == "L":
            o.location = True
        elif key == "np":
            o.no_meter = True
        elif key == "o":
            o.output = value
        elif key == "w":
            o.write_out = value
        elif key == "X":
            o.method = value
        elif key == "H":
            name, _, v = value.partition(":")
            o.headers.append((name.strip(), v.strip()))
        elif key in ("m", "connect"):
            try:
                seconds = float(value)
            except ValueError:
                raise _CurlError(2, "option --max-time: expected a proper numerical parameter") from None
            if key == "m":
                o.max_time = seconds
            else:
                o.connect_timeout = seconds
        elif key == "d":
            o.data = value if o.data is None else o.data + "&" + value
        elif key == "A":
            o.agent = value
        elif key == "url":
            o.urls.append(value)

    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            name, eq, inline = a.partition("=")
            if name not in _CURL_LONG:
                raise _CurlError(2, f"option {name}: is unknown\ncurl: try 'curl --help' or 'curl --manual' for more information")
            key = _CURL_LONG[name]
            if key in _CURL_LONG_VALUE:
                if not eq:
                    i += 1
                    if i >= len(args):
                        raise _CurlError(2, f"option {name}: requires parameter")
                    inline = args[i]
                apply(key, inline)
            elif key:
                apply(key, "")
        elif a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                ch = a[j]
                if ch in _CURL_SHORT_VALUE:
                    value = a[j + 1:]
                    if not value:
                        i += 1
                        if i >= len(args):
                            raise _CurlError(2, f"option -{ch}: requires parameter")
                        value = args[i]
                    apply({"T": "", "Y": "", "y": "", "z": "", "K": "", "b": "", "c": "", "e": "", "t": "",
                           "r": ""}.get(ch, ch), value)
                    break
                if ch in "sSfviILk46N#":
                    apply(ch, "")
                else:
                    raise _CurlError(2, f"option -{ch}: is unknown\ncurl: try 'curl --help' or 'curl --manual' for more information")
                j += 1
        else:
            o.urls.append(a)
        i += 1
    return o


_METER_HEAD = ("  % Total    % Received % Xferd  Average Speed   Time    Time     Time  Current\n"
               "                                 Dload  Upload   Total   Spent    Left  Speed\n")


def _meter(size: int, seconds: float) -> str:
    speed = int(size / seconds) if seconds > 0 else size
    pct = 100 if size else 0
    return (_METER_HEAD + f"\r{pct:>3} {size:>5}  {pct:>3} {size:>5}    0     0 {speed:>6}      0 "
            f"--:--:-- --:--:-- --:--:-- {speed:>5}\n")


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


@applet("curl")
def curl(sh: Shell, argv: list[str], io: IO) -> int:
    try:
        o = _curl_opts(argv)
    except _CurlError as e:
        sh.err(io, f"curl: {e.message}")
        return e.code
    if not o.urls:
        sh.err(io, "curl: try 'curl --help' or 'curl --manual' for more information")
        return 2
    code = 0
    for url in o.urls:
        code = _curl_one(sh, o, url, io)
    return code


def _curl_one(sh: Shell, o: _CurlOpts, url: str, io: IO) -> int:
    show_errors = not o.silent or o.show_error
    out: Out = io.stdout
    if o.output is not None and o.output != "-":
        path = sh.path(o.output)
        if path != "/dev/null":
            try:
                sh.files.write(path, b"")
            except FSError as e:
                sh.err(io, f"curl: (23) Failure writing output to destination: {e}")
                return 23
        out = _Sink(sh, path)
    meter = not o.silent and not o.no_meter and not o.verbose and (not sh.tty or out is not io.stdout)
    info = {"http_code": "000", "response_code": "000", "url_effective": url, "remote_ip": "", "remote_port": "",
            "content_type": "", "size_download": "0", "num_redirects": "0", "exitcode": "0", "errormsg": "",
            "scheme": "", "method": o.method or ("HEAD" if o.head else "POST" if o.data is not None else "GET")}
    spent = 0.0
    code = 0
    size = 0
    try:
        redirects = 0
        while True:
            t = _target(url)
            if t is None:
                raise _CurlError(3, "URL rejected: Malformed input to a URL function" if "://" in url
                                 else "URL using bad/illegal format or missing URL")
            info.update(url_effective=t.url, scheme=t.scheme.upper(), remote_port=str(t.port))
            limit = o.max_time
            try:
                ip = _resolve(sh, t.host)
            except NetworkError as e:
                if e.kind == "timeout":
                    spent += min(e.seconds, limit) if limit else e.seconds
                    if limit is not None and e.seconds >= limit:
                        raise _CurlError(28, f"Resolving timed out after {_ms(limit)} milliseconds") from None
                raise _CurlError(6, f"Could not resolve host: {t.host}") from None
            info["remote_ip"] = ip
            method = info["method"]
            headers = [("Host", t.hostport), ("User-Agent", o.agent), ("Accept", "*/*")]
            body = (o.data or "").encode()
            if o.data is not None:
                headers += [("Content-Length", str(len(body))), ("Content-Type", "application/x-www-form-urlencoded")]
            names = {h.lower() for h, _ in o.headers}
            headers = [h for h in headers if h[0].lower() not in names] + [h for h in o.headers if h[1]]
            if o.verbose:
                sh.err(io, f"*   Trying {ip}:{t.port}...")
            remaining = None if limit is None else max(limit - spent, 0.0)
            try:
                resp = sh.view.http(HttpRequest(method, t.url, tuple(headers), body, remaining))
            except NetworkError as e:
                raise _net_error(e, t, ip, remaining, o.connect_timeout, spent) from None
            if remaining is not None and resp.seconds > remaining:
                spent += remaining
                raise _CurlError(28, f"Operation timed out after {_ms(limit or 0)} milliseconds with 0 bytes received")
            spent += resp.seconds
            if o.verbose:
                sh.err(io, f"* Connected to {t.host} ({ip}) port {t.port}")
                for line in [f"{method} {t.path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers] + [""]:
                    sh.err(io, f"> {line}")
                for line in _head_lines(resp) + [""]:
                    sh.err(io, f"< {line}")
            info.update(http_code=f"{resp.status:03d}", response_code=f"{resp.status:03d}",
                        content_type=_header(resp, "content-type") or "")
            location = _header(resp, "location")
            if o.location and location and 300 <= resp.status < 400 and redirects < 50:
                redirects += 1
                info["num_redirects"] = str(redirects)
                url = urljoin(t.url, location)
                if resp.status == 303:
                    info["method"] = "GET"
                continue
            break
        if (o.fail or o.fail_body) and resp.status >= 400:
            if o.fail_body:
                out.write(resp.body)
            raise _CurlError(22, f"The requested URL returned error: {resp.status}")
        if o.include or o.head:
            out.write("".join(line + "\r\n" for line in _head_lines(resp)) + "\r\n")
        if not o.head:
            out.write(resp.body)
            size = len(resp.body)
        info["size_download"] = str(size)
        if o.verbose:
            sh.err(io, f"* Connection #0 to host {t.host} left intact")
    except _CurlError as e:
        code = e.code
        info["exitcode"], info["errormsg"] = str(code), e.message
        if meter:
            io.stderr.write(_meter(0, 0))
            meter = False
        if show_errors:
            sh.err(io, f"curl: ({code}) {e.message}")
    sh.advance(spent)
    if meter:
        io.stderr.write(_meter(size, spent))
    if o.write_out is not None:
        io.stdout.write(_write_out(o.write_out, info, spent, sh, io))
    return code


def _net_error(e: NetworkError, t: _Target, ip: str, remaining: Optional[float], connect_timeout: Optional[float],
               spent: float) -> _CurlError:
    if e.kind == "resolve":
        return _CurlError(6, f"Could not resolve host: {t.host}")
    if e.kind == "reset":
        return _CurlError(56, "Recv failure: Connection reset by peer")
    if e.kind in ("refused", "unreachable"):
        return _CurlError(7, f"Failed to connect to {t.host} port {t.port} after {_ms(e.seconds)} ms: "
                             f"Couldn't connect to server")
    limits = [x for x in (remaining, connect_timeout) if x is not None]
    wait = min([e.seconds, KERNEL_CONNECT_TIMEOUT] + limits) if math.isinf(e.seconds) else min([e.seconds] + limits)
    return _CurlError(28, f"Failed to connect to {t.host} port {t.port} after {_ms(wait)} ms: Timeout was reached")


def _write_out(fmt: str, info: dict[str, str], spent: float, sh: Shell, io: IO) -> str:
    times = {k: f"{spent:.6f}" for k in ("time_total", "time_starttransfer", "time_pretransfer")}
    times.update(time_namelookup="0.000000", time_connect="0.000000", time_appconnect="0.000000",
                 time_redirect="0.000000")

    def var(m: re.Match[str]) -> str:
        name = m.group(1)
        if name in info:
            return info[name]
        if name in times:
            return times[name]
        if name in ("speed_download",):
            return str(int(int(info["size_download"]) / spent) if spent else info["size_download"])
        if name.startswith("header{"):
            return ""
        sh.err(io, f"curl: unknown --write-out variable: '{name}'")
        return ""

    text = re.sub(r"%\{([^}]*)\}", var, fmt)
    return text.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r").replace("%%", "%")


def _head_lines(resp: HttpResponse) -> list[str]:
    lines = [f"HTTP/{resp.http_version} {resp.status} {_reason(resp.status, resp.reason)}".rstrip()]
    hdrs = list(resp.headers)
    if not any(k.lower() == "content-length" for k, _ in hdrs):
        hdrs.append(("content-length", str(len(resp.body))))
    return lines + [f"{k}: {v}" for k, v in hdrs]


def _header(resp: HttpResponse, name: str) -> Optional[str]:
    for k, v in resp.headers:
        if k.lower() == name:
            return v
    return None


class _Sink:
    def __init__(self, sh: Shell, path: str) -> None:
        self.sh = sh
        self.path = path

    def write(self, data: Union[bytes, str]) -> int:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if self.path != "/dev/null":
            self.sh.files.write(self.path, raw, append=True)
        return len(raw)


# -- wget (busybox) ------------------------------------------------------------------------------
@applet("wget")
def wget(sh: Shell, argv: list[str], io: IO) -> int:
    quiet = spider = server_response = False
    output: Optional[str] = None
    timeout: Optional[float] = None
    headers: list[tuple[str, str]] = []
    agent = "Wget"
    urls: list[str] = []
    args = argv[1:]
    i = 0

    def value() -> str:
        nonlocal i
        i += 1
        if i >= len(args):
            raise ValueError("option requires an argument")
        return args[i]

    try:
        while i < len(args):
            a = args[i]
            if a in ("--spider",):
                spider = True
            elif a in ("--quiet",):
                quiet = True
            elif a in ("--server-response",):
                server_response = True
            elif a.startswith("--output-document"):
                output = a.partition("=")[2] or value()
            elif a.startswith("--timeout"):
                timeout = float(a.partition("=")[2] or value())
            elif a.startswith("--header"):
                name, _, v = (a.partition("=")[2] or value()).partition(":")
                headers.append((name.strip(), v.strip()))
            elif a.startswith("--user-agent"):
                agent = a.partition("=")[2] or value()
            elif a.startswith("--") and a != "--":
                pass  # busybox ignores GNU long options it does not know (--no-check-certificate, …)
            elif a.startswith("-") and len(a) > 1:
                j = 1
                while j < len(a):
                    ch = a[j]
                    if ch in "OTUY":
                        rest = a[j + 1:] or value()
                        if ch == "O":
                            output = rest
                        elif ch == "T":
                            timeout = float(rest)
                        elif ch == "U":
                            agent = rest
                        break
                    if ch == "q":
                        quiet = True
                    elif ch == "S":
                        server_response = True
                    elif ch in "cs":
                        pass
                    else:
                        raise ValueError(f"unrecognized option: {ch}")
                    j += 1
            else:
                urls.append(a)
            i += 1
    except ValueError as e:
        sh.err(io, f"wget: {e}")
        return 1
    if not urls:
        sh.err(io, "BusyBox v1.36.1 multi-call binary.\n\nUsage: wget [-cqS] [--spider] [-O FILE] [-o LOGFILE] "
                   "[--header STR]\n\t[--post-data STR | --post-file FILE] [-Y on/off]\n\t[-P DIR] [-U AGENT] "
                   "[-T SEC] URL...")
        return 1
    for url in urls:
        code = _wget_one(sh, io, url, quiet, spider, server_response, output, timeout, headers, agent)
        if code:
            return code
    return 0


def _wget_one(sh: Shell, io: IO, url: str, quiet: bool, spider: bool, server_response: bool,
              output: Optional[str], timeout: Optional[float], headers: list[tuple[str, str]], agent: str) -> int:
    t = _target(url)
    if t is None:
        sh.err(io, f"wget: not an http or ftp url: {url}")
        return 1
    try:
        ip = _resolve(sh, t.host)
    except NetworkError as e:
        sh.advance(e.seconds if not math.isinf(e.seconds) else 5.0)
        sh.err(io, f"wget: bad address '{t.host}'")
        return 1
    if not quiet:
        sh.err(io, f"Connecting to {t.hostport} ({ip}:{t.port})")
    req_headers = (("Host", t.hostport), ("User-Agent", agent), *headers)
    try:
        resp = sh.view.http(HttpRequest("HEAD" if spider else "GET", t.url, req_headers, b"", timeout))
    except NetworkError as e:
        if e.kind == "timeout":
            wait = timeout if timeout is not None else KERNEL_CONNECT_TIMEOUT
            sh.advance(min(e.seconds, wait))
            sh.err(io, "wget: download timed out" if timeout is not None and e.seconds >= timeout
                   else f"wget: can't connect to remote host ({ip}): Connection timed out")
        elif e.kind == "reset":
            sh.err(io, "wget: error getting response: Connection reset by peer")
        else:
            why = "Connection refused" if e.kind == "refused" else "Host is unreachable"
            sh.err(io, f"wget: can't connect to remote host ({ip}): {why}")
        return 1
    if timeout is not None and resp.seconds > timeout:
        sh.advance(timeout)
        sh.err(io, "wget: download timed out")
        return 1
    sh.advance(resp.seconds)
    if server_response:
        for line in _head_lines(resp):
            io.stderr.write(f"  {line}\n")
    if resp.status >= 400:
        sh.err(io, f"wget: server returned error: HTTP/{resp.http_version} {resp.status} "
                   f"{_reason(resp.status, resp.reason)}".rstrip())
        return 1
    if spider:
        if not quiet:
            sh.err(io, "remote file exists")
        return 0
    name = output if output is not None else (posixpath.basename(t.path.split("?")[0]) or "index.html")
    to_stdout = name == "-"
    if not quiet:
        sh.err(io, "writing to stdout" if to_stdout else f"saving to '{name}'")
    if to_stdout:
        io.stdout.write(resp.body)
    else:
        try:
            sh.files.write(sh.path(name), resp.body)
        except FSError as e:
            sh.err(io, f"wget: can't open '{name}': {e}")
            return 1
    if not quiet:
        label = "-" if to_stdout else posixpath.basename(name)
        sh.err(io, f"{label:<20} 100% |{'*' * 32}| {len(resp.body):>5}  0:00:00 ETA")
        sh.err(io, "written to stdout" if to_stdout else f"'{name}' saved")
    return 0


# -- DNS and TCP ---------------------------------------------------------------------------------
def _nameserver(sh: Shell) -> str:
    try:
        text = sh.files.read("/etc/resolv.conf").decode("utf-8", "replace")
    except FSError:
        return "10.96.0.10"
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            return parts[1]
    return "10.96.0.10"


@applet("nslookup")
def nslookup(sh: Shell, argv: list[str], io: IO) -> int:
    args = [a for a in argv[1:] if not a.startswith("-")]
    if not args:
        sh.err(io, "BusyBox v1.36.1 multi-call binary.\n\nUsage: nslookup [-type=QUERY_TYPE] [-debug] HOST [DNS_SERVER]")
        return 1
    name = args[0]
    server = args[1] if len(args) > 1 else _nameserver(sh)
    try:
        ip = _resolve(sh, name)
    except NetworkError as e:
        if e.kind == "timeout":
            sh.advance(e.seconds if not math.isinf(e.seconds) else 15.0)
            io.stdout.write(";; connection timed out; no servers could be reached\n\n")
            return 1
        io.stdout.write(f"Server:\t\t{server}\nAddress:\t{server}:53\n\n** server can't find {name}: NXDOMAIN\n\n")
        return 1
    io.stdout.write(f"Server:\t\t{server}\nAddress:\t{server}:53\n\nName:\t{name}\nAddress: {ip}\n\n")
    return 0


@applet("getent")
def getent(sh: Shell, argv: list[str], io: IO) -> int:
    if len(argv) < 2:
        sh.err(io, "Usage: getent [-s service] database [key ...]")
        return 1
    db, keys = argv[1], argv[2:]
    if db in ("hosts", "ahosts", "ahostsv4"):
        if not keys:
            text = _file(sh, "/etc/hosts")
            io.stdout.write("".join(line + "\n" for line in text.splitlines() if line.split("#")[0].strip()))
            return 0
        status = 0
        for key in keys:
            try:
                ip = _resolve(sh, key)
            except NetworkError:
                status = 2
                continue
            io.stdout.write(f"{ip:<15} {key}\n")
        return status
    if db in ("passwd", "group"):
        lines = _file(sh, f"/etc/{db}").splitlines()
        if not keys:
            io.stdout.write("".join(line + "\n" for line in lines))
            return 0
        found = [line for line in lines if line.split(":")[0] in keys or line.split(":")[2:3] == keys[:1]]
        io.stdout.write("".join(line + "\n" for line in found))
        return 0 if found else 2
    sh.err(io, f"Unknown database: {db}")
    return 1


def _file(sh: Shell, path: str) -> str:
    try:
        return sh.files.read(path).decode("utf-8", "replace")
    except FSError:
        return ""


@applet("nc")
def nc(sh: Shell, argv: list[str], io: IO) -> int:
    zero = verbose = False
    wait: Optional[float] = None
    rest: list[str] = []
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and len(a) > 1:
            for j, ch in enumerate(a[1:], 1):
                if ch == "z":
                    zero = True
                elif ch == "v":
                    verbose = True
                elif ch == "w":
                    v = a[j + 1:] or (args[i + 1] if i + 1 < len(args) else "")
                    if not a[j + 1:]:
                        i += 1
                    try:
                        wait = float(v)
                    except ValueError:
                        sh.err(io, f"nc: invalid number '{v}'")
                        return 1
                    break
                elif ch in "nu":
                    pass
                else:
                    sh.err(io, f"nc: unrecognized option '-{ch}'")
                    return 1
        else:
            rest.append(a)
        i += 1
    if len(rest) < 2:
        sh.err(io, "BusyBox v1.36.1 multi-call binary.\n\nUsage: nc [OPTIONS] HOST PORT  - connect")
        return 1
    host, port_s = rest[0], rest[1]
    if not port_s.isdigit():
        sh.err(io, f"nc: bad port '{port_s}'")
        return 1
    port = int(port_s)
    try:
        ip = _resolve(sh, host)
    except NetworkError:
        sh.err(io, f"nc: bad address '{host}'")
        return 1
    label = f"{host} ({ip}:{port})"
    try:
        sh.advance(sh.view.connect(host, port, wait))
    except NetworkError as e:
        if e.kind == "timeout":
            sh.advance(min(e.seconds, wait if wait is not None else KERNEL_CONNECT_TIMEOUT))
            why = "Connection timed out"
        else:
            why = "Connection refused" if e.kind in ("refused", "resolve") else "Host is unreachable"
        if verbose or not zero:
            sh.err(io, f"nc: {label}: {why}")
        return 1
    if verbose:
        sh.err(io, f"{label} open")
    if zero:
        return 0
    return _nc_send(sh, io, host, port, wait)


def _nc_send(sh: Shell, io: IO, host: str, port: int, wait: Optional[float]) -> int:
    """``printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc host port``: an HTTP request on stdin is sent
    through the view; any other payload gets no answer (the simulated services speak HTTP)."""
    data = io.stdin.read()
    m = re.match(rb"([A-Z]+) (\S+) HTTP/(1\.[01])\r?\n", data)
    if not m:
        return 0
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\n")[1:]
    headers = tuple((k.strip().decode(), v.strip().decode()) for k, _, v in (h.partition(b":") for h in head) if k.strip())
    body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
    url = f"http://{host}:{port}{m.group(2).decode()}"
    try:
        resp = sh.view.http(HttpRequest(m.group(1).decode(), url, headers, body, wait))
    except NetworkError:
        return 1
    sh.advance(resp.seconds)
    io.stdout.write("".join(line + "\r\n" for line in _head_lines(resp)).encode() + b"\r\n" + resp.body)
    return 0
