"""ash builtins (echo, printf, test, cd, export, exit, …) and the system applets (env, ps,
hostname, date, id, uname, sleep, …), with busybox's output formats and exit codes."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Optional

from .shell import BUILTINS, IO, SHELLS, FSError, Shell, ShellExit, _Break, applet, builtin

# -- builtins -----------------------------------------------------------------------------------
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", "e": "\x1b"}


def _backslash(s: str) -> tuple[str, bool]:
    """echo -e / printf %b escapes; True if ``\\c`` stopped the output."""
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "c":
                return "".join(out), True
            if n in _ESCAPES:
                out.append(_ESCAPES[n])
                i += 2
                continue
            if n == "0" or n in "1234567":
                m = re.match(r"0?([0-7]{1,3})", s[i + 1:])
                if m:
                    out.append(chr(int(m.group(1), 8)))
                    i += 1 + len(m.group(0))
                    continue
            if n == "x":
                m = re.match(r"[0-9a-fA-F]{1,2}", s[i + 2:])
                if m:
                    out.append(chr(int(m.group(0), 16)))
                    i += 2 + len(m.group(0))
                    continue
        out.append(c)
        i += 1
    return "".join(out), False


@builtin("echo")
@applet("echo")  # also a program in the image (/bin/echo)
def echo(sh: Shell, argv: list[str], io: IO) -> int:
    args = argv[1:]
    newline, escapes = True, False
    while args and re.fullmatch(r"-[neE]+", args[0]):
        for ch in args.pop(0)[1:]:
            newline = newline and ch != "n"
            escapes = True if ch == "e" else False if ch == "E" else escapes
    text = " ".join(args)
    if escapes:
        text, stop = _backslash(text)
        if stop:
            newline = False
    io.stdout.write(text + ("\n" if newline else ""))
    return 0


_FMT = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d+))?([diouxXeEfgGcsb%])")


@builtin("printf")
@applet("printf")  # also a program in the image (/bin/printf)
def printf(sh: Shell, argv: list[str], io: IO) -> int:
    if len(argv) < 2:
        sh.err(io, "printf: usage: printf FORMAT [ARGUMENT...]")
        return 1
    fmt, args = argv[1], argv[2:]
    status = 0
    while True:
        used = 0

        def sub(m: re.Match[str]) -> str:
            nonlocal used, status
            flags, width, prec, conv = m.groups()
            if conv == "%":
                return "%"
            arg = args[used] if used < len(args) else ""  # noqa: B023 - sub runs inside this iteration
            used += 1
            spec = "%" + flags + (width or "") + (("." + prec) if prec is not None else "")
            if conv in "diouxX":
                try:
                    n = int(arg, 0) if arg else 0
                except ValueError:
                    sh.err(io, f"printf: invalid number '{arg}'")
                    status = 1
                    n = 0
                return (spec + ("d" if conv in "iu" else conv)) % n
            if conv in "eEfgG":
                try:
                    x = float(arg) if arg else 0.0
                except ValueError:
                    sh.err(io, f"printf: invalid number '{arg}'")
                    status = 1
                    x = 0.0
                return (spec + conv) % x
            if conv == "c":
                return (spec + "s") % arg[:1]
            if conv == "b":
                return (spec + "s") % _backslash(arg)[0]
            return (spec + "s") % arg

        text = _FMT.sub(sub, fmt)
        io.stdout.write(_backslash(text)[0])
        if used == 0 or used >= len(args):
            break
        args = args[used:]
    return status


def _test(sh: Shell, args: list[str]) -> bool:
    if not args:
        return False
    if args[0] == "!":
        return not _test(sh, args[1:])
    for i, a in enumerate(args):
        if a in ("-a", "-o") and 0 < i < len(args) - 1:
            left, right = _test(sh, args[:i]), _test(sh, args[i + 1:])
            return (left and right) if a == "-a" else (left or right)
    if len(args) == 1:
        return args[0] != ""
    if len(args) == 2:
        op, x = args
        p = sh.path(x) if x else ""
        if op == "-n":
            return x != ""
        if op == "-z":
            return x == ""
        if op in ("-e", "-r"):
            return bool(x) and sh.files.exists(p)
        if op == "-f":
            return bool(x) and sh.files.is_file(p)
        if op == "-d":
            return bool(x) and sh.files.is_dir(p)
        if op == "-s":
            return bool(x) and sh.files.is_file(p) and sh.files.size(p) > 0
        if op in ("-x", "-w"):
            return bool(x) and sh.files.exists(p) and (op == "-w" or sh.files.is_dir(p))
        raise ValueError(f"{op}: unknown operand")
    if len(args) == 3:
        a, op, b = args
        if op in ("=", "=="):
            return a == b
        if op == "!=":
            return a != b
        if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
            try:
                m, n = int(a), int(b)
            except ValueError:
                raise ValueError(f"{b if a.lstrip('-').isdigit() else a}: bad number") from None
            return {"-eq": m == n, "-ne": m != n, "-lt": m < n, "-le": m <= n, "-gt": m > n, "-ge": m >= n}[op]
    raise ValueError("syntax error")


@builtin("test", "[")
@applet("test", "[")  # also a program in the image (/bin/test)
def test(sh: Shell, argv: list[str], io: IO) -> int:
    args = argv[1:]
    if argv[0] == "[":
        if not args or args[-1] != "]":
            sh.err(io, "sh: [: missing ]")
            return 2
        args = args[:-1]
    try:
        return 0 if _test(sh, args) else 1
    except ValueError as e:
        sh.err(io, f"sh: {argv[0]}: {e}")
        return 2


@builtin("true", ":")
@applet("true")  # also a program in the image (/bin/true)
def true(sh: Shell, argv: list[str], io: IO) -> int:
    return 0


@builtin("false")
@applet("false")  # also a program in the image (/bin/false)
def false(sh: Shell, argv: list[str], io: IO) -> int:
    return 1


@builtin("exit")
def exit_(sh: Shell, argv: list[str], io: IO) -> int:
    if len(argv) > 1:
        try:
            code = int(argv[1])
        except ValueError:
            sh.err(io, f"sh: exit: Illegal number: {argv[1]}")
            raise ShellExit(2) from None
    else:
        code = sh.status
    raise ShellExit(code & 0xFF)


@builtin("break", "continue")
def break_(sh: Shell, argv: list[str], io: IO) -> int:
    n = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 1
    raise _Break(max(n, 1), argv[0] == "continue")


@builtin("cd")
def cd(sh: Shell, argv: list[str], io: IO) -> int:
    target = argv[1] if len(argv) > 1 else sh.vars.get("HOME", "/")
    if target == "-":
        target = sh.vars.get("OLDPWD", sh.cwd)
    p = sh.path(target)
    if not sh.files.is_dir(p):
        sh.err(io, f"sh: cd: can't cd to {target}: {'Not a directory' if sh.files.is_file(p) else 'No such file or directory'}")
        return 2
    sh.vars["OLDPWD"] = sh.cwd
    sh.cwd = p
    return 0


@builtin("pwd")
@applet("pwd")  # also a program in the image (/bin/pwd)
def pwd(sh: Shell, argv: list[str], io: IO) -> int:
    io.stdout.write(sh.cwd + "\n")
    return 0


@builtin("export")
def export(sh: Shell, argv: list[str], io: IO) -> int:
    names = [a for a in argv[1:] if a != "-p"]
    if not names:
        for k in sorted(sh.exported):
            if k in sh.vars:
                io.stdout.write(f"export {k}='{sh.vars[k]}'\n")
        return 0
    for a in names:
        name, eq, value = a.partition("=")
        if eq:
            sh.vars[name] = value
        sh.exported.add(name)
    return 0


@builtin("unset")
def unset(sh: Shell, argv: list[str], io: IO) -> int:
    for name in argv[1:]:
        if name not in ("-v", "-f"):
            sh.vars.pop(name, None)
            sh.exported.discard(name)
    return 0


@builtin("set")
def set_(sh: Shell, argv: list[str], io: IO) -> int:
    args = argv[1:]
    if not args:
        for k in sorted(sh.vars):
            io.stdout.write(f"{k}='{sh.vars[k]}'\n")
        return 0
    while args and args[0][:1] in "-+" and args[0] not in ("-", "--"):
        opt = args.pop(0)
        on = opt[0] == "-"
        if opt[1:] == "o" and args:
            name = args.pop(0)
            if name == "errexit":
                sh.errexit = on
            elif name == "xtrace":
                sh.xtrace = on
            continue
        for ch in opt[1:]:
            if ch == "e":
                sh.errexit = on
            elif ch == "x":
                sh.xtrace = on
    if args and args[0] in ("-", "--"):
        args.pop(0)
    if args or (argv[1:] and argv[-1] == "--"):
        sh.params = args
    return 0


@builtin("shift")
def shift(sh: Shell, argv: list[str], io: IO) -> int:
    n = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 1
    if n > len(sh.params):
        return 1
    sh.params = sh.params[n:]
    return 0


@builtin("read")
def read(sh: Shell, argv: list[str], io: IO) -> int:
    names = [a for a in argv[1:] if not a.startswith("-")]
    raw = io.stdin.readline()
    if not raw:
        return 1
    line = raw.decode("utf-8", "replace").rstrip("\n").rstrip("\r")
    names = names or ["REPLY"]
    parts = line.split(None, len(names) - 1) if len(names) > 1 else [line.strip()]
    for i, name in enumerate(names):
        sh.vars[name] = parts[i] if i < len(parts) else ""
    return 0


@builtin("eval")
def eval_(sh: Shell, argv: list[str], io: IO) -> int:
    return sh.run_script(" ".join(argv[1:]), io)


def _kind(sh: Shell, name: str) -> Optional[str]:
    if name in BUILTINS:
        return "builtin"
    if sh.available(name):
        return f"/bin/{name}" if name in ("sh", "ash") else f"/usr/bin/{name}"
    return None


@builtin("type")
def type_(sh: Shell, argv: list[str], io: IO) -> int:
    status = 0
    for name in argv[1:]:
        kind = _kind(sh, name)
        if kind is None:
            io.stdout.write(f"{name}: not found\n")
            status = 127
        elif kind == "builtin":
            io.stdout.write(f"{name} is a shell builtin\n")
        else:
            io.stdout.write(f"{name} is {kind}\n")
    return status


@builtin("command")
def command(sh: Shell, argv: list[str], io: IO) -> int:
    args = argv[1:]
    if args and args[0] in ("-v", "-V"):
        status = 0
        for name in args[1:]:
            kind = _kind(sh, name)
            if kind is None:
                status = 1
            else:
                io.stdout.write((name if kind == "builtin" else kind) + "\n")
        return status
    if not args:
        return 0
    if args[0] in BUILTINS:
        return BUILTINS[args[0]](sh, args, io)
    return sh.run_program(args, io)


@applet("which")
def which(sh: Shell, argv: list[str], io: IO) -> int:
    status = 0
    for name in argv[1:]:
        if sh.available(name):
            io.stdout.write((f"/bin/{name}" if name in SHELLS else f"/usr/bin/{name}") + "\n")
        else:
            status = 1
    return status


# -- system applets -------------------------------------------------------------------------------
@applet("env")
def env(sh: Shell, argv: list[str], io: IO) -> int:
    args = argv[1:]
    environ = sh.environ()
    if args and args[0] in ("-i", "-"):
        environ = {}
        args = args[1:]
    while args and "=" in args[0] and not args[0].startswith("="):
        k, _, v = args.pop(0).partition("=")
        environ[k] = v
    if not args:
        for k, v in environ.items():
            io.stdout.write(f"{k}={v}\n")
        return 0

    def run(sub: Shell) -> int:
        sub.vars = dict(environ)
        sub.exported = set(environ)
        if args[0] in BUILTINS and args[0] not in ("exit",):
            return BUILTINS[args[0]](sub, args, io)
        fn, code, _ = sub.lookup(args[0])
        if fn is None:
            sh.err(io, f"env: can't execute '{args[0]}': No such file or directory")
            return code
        return fn(sub, args, io)
    return sh.subshell(run)


@applet("printenv")
def printenv(sh: Shell, argv: list[str], io: IO) -> int:
    environ = sh.environ()
    if len(argv) == 1:
        for k, v in environ.items():
            io.stdout.write(f"{k}={v}\n")
        return 0
    status = 0
    for name in argv[1:]:
        if name in environ:
            io.stdout.write(environ[name] + "\n")
        else:
            status = 1
    return status


@applet("hostname")
def hostname(sh: Shell, argv: list[str], io: IO) -> int:
    name = sh.view.hostname
    if "-i" in argv[1:]:
        ip = _hosts_file(sh).get(name)
        if ip is None:
            try:
                ip = sh.view.resolve(name)
            except Exception:
                ip = None
        if ip is None:
            sh.err(io, f"hostname: {name}: Name does not resolve")
            return 1
        io.stdout.write(ip + "\n")
        return 0
    if "-s" in argv[1:]:
        name = name.split(".")[0]
    io.stdout.write(name + "\n")
    return 0


def _hosts_file(sh: Shell) -> dict[str, str]:
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


def _strftime(t: datetime, fmt: str) -> str:
    # Python's %s and %N are platform-dependent or missing: do them here.
    fmt = fmt.replace("%s", str(int(t.timestamp()))).replace("%N", f"{t.microsecond * 1000:09d}")
    return t.strftime(fmt)


@applet("date")
def date(sh: Shell, argv: list[str], io: IO) -> int:
    t = sh.now().astimezone(timezone.utc)
    fmt = "%a %b %e %H:%M:%S %Z %Y"
    for a in argv[1:]:
        if a.startswith("+"):
            fmt = a[1:]
        elif a in ("-u", "--utc"):
            pass
        elif a in ("-I", "--iso-8601", "-Idate"):
            fmt = "%Y-%m-%d"
        elif a.startswith("-I") or a.startswith("--iso-8601="):
            fmt = "%Y-%m-%dT%H:%M:%S+00:00"
        elif a in ("-R", "--rfc-2822"):
            fmt = "%a, %d %b %Y %H:%M:%S +0000"
        else:
            sh.err(io, f"date: invalid date '{a}'")
            return 1
    io.stdout.write(_strftime(t, fmt).replace("%Z", "UTC") + "\n")
    return 0


def _passwd(sh: Shell) -> dict[int, tuple[str, int]]:
    users: dict[int, tuple[str, int]] = {0: ("root", 0)}
    try:
        text = sh.files.read("/etc/passwd").decode("utf-8", "replace")
    except FSError:
        return users
    for line in text.splitlines():
        f = line.split(":")
        if len(f) >= 4 and f[2].isdigit() and f[3].isdigit():
            users[int(f[2])] = (f[0], int(f[3]))
    return users


@applet("id")
def id_(sh: Shell, argv: list[str], io: IO) -> int:
    uid = sh.view.uid
    user = _passwd(sh).get(uid)
    gid = user[1] if user else uid
    if "-u" in argv[1:]:
        io.stdout.write((user[0] if user and "-n" in argv[1:] else str(uid)) + "\n")
        return 0
    name = f"({user[0]})" if user else ""
    gname = f"({'root' if gid == 0 else user[0] if user else ''})" if gid == 0 or user else ""
    io.stdout.write(f"uid={uid}{name} gid={gid}{gname} groups={gid}{gname}\n")
    return 0


@applet("whoami")
def whoami(sh: Shell, argv: list[str], io: IO) -> int:
    user = _passwd(sh).get(sh.view.uid)
    if user is None:
        sh.err(io, f"whoami: unknown uid {sh.view.uid}")
        return 1
    io.stdout.write(user[0] + "\n")
    return 0


KERNEL = ("Linux", "5.15.0", "#1 SMP", "x86_64")


@applet("uname")
def uname(sh: Shell, argv: list[str], io: IO) -> int:
    system, release, version, machine = KERNEL
    flags = "".join(a[1:] for a in argv[1:] if a.startswith("-"))
    if "a" in flags:
        io.stdout.write(f"{system} {sh.view.hostname} {release} {version} {machine} GNU/Linux\n")
        return 0
    parts = []
    for ch, value in (("s", system), ("n", sh.view.hostname), ("r", release), ("v", version), ("m", machine),
                      ("o", "GNU/Linux")):
        if ch in flags:
            parts.append(value)
    io.stdout.write(" ".join(parts or [system]) + "\n")
    return 0


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@applet("sleep")
def sleep(sh: Shell, argv: list[str], io: IO) -> int:
    if len(argv) < 2:
        sh.err(io, "BusyBox v1.36.1 multi-call binary.\n\nUsage: sleep [N]...")
        return 1
    total = 0.0
    for a in argv[1:]:
        if a in ("inf", "infinity"):  # busybox parses them with strtod: never wakes up
            total = float("inf")
            continue
        m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", a)
        if m is None:
            sh.err(io, f"sleep: invalid number '{a}'")
            return 1
        total += float(m.group(1)) * _UNITS[m.group(2)]
    sh.advance(total)  # virtual time only: an exec never waits on the wall clock
    return 0


@applet("uptime")
def uptime(sh: Shell, argv: list[str], io: IO) -> int:
    """busybox's one line, from the container's ``/proc/uptime`` (the node's boot, in virtual
    time); no load is simulated beyond what ``/proc/loadavg`` says."""
    try:
        seconds = int(float(sh.files.read("/proc/uptime").split()[0]))
    except (FSError, ValueError, IndexError):
        seconds = 0
    try:
        load = ", ".join(sh.files.read("/proc/loadavg").decode().split()[:3])
    except FSError:
        load = "0.00, 0.00, 0.00"
    days, rest = divmod(seconds, 86400)
    hours, minutes = divmod(rest // 60, 60)
    up = (f"{days} day{'s' if days != 1 else ''}, " if days else "") + \
        (f"{hours:2d}:{minutes:02d}" if hours else f"{minutes} min")
    now = sh.now().astimezone(timezone.utc).strftime("%H:%M:%S")
    io.stdout.write(f" {now} up {up},  0 users,  load average: {load}\n")
    return 0


@applet("ps")
def ps(sh: Shell, argv: list[str], io: IO) -> int:
    io.stdout.write("PID   USER     TIME  COMMAND\n")
    rows = [(p.pid, p.user, p.time, p.command) for p in sh.view.processes]
    rows.append((sh.pid, _user(sh), "0:00", sh.name if sh.name in SHELLS else "sh"))
    rows.append((sh.pid + 1, _user(sh), "0:00", " ".join(argv)))
    for pid, user, time, cmd in rows:
        io.stdout.write(f"{pid:5d} {user[:8]:<8} {time:>5} {cmd}\n")
    return 0


def _user(sh: Shell) -> str:
    user = _passwd(sh).get(sh.view.uid)
    return user[0] if user else str(sh.view.uid)


@applet("seq")
def seq(sh: Shell, argv: list[str], io: IO) -> int:
    try:
        nums = [int(a) for a in argv[1:]]
    except ValueError:
        sh.err(io, f"seq: invalid number '{next(a for a in argv[1:] if not a.lstrip('-').isdigit())}'")
        return 1
    if not 1 <= len(nums) <= 3:
        sh.err(io, "BusyBox v1.36.1 multi-call binary.\n\nUsage: seq [-w] [-s SEP] [FIRST [INC]] LAST")
        return 1
    first, inc, last = (1, 1, nums[0]) if len(nums) == 1 else (nums[0], 1, nums[1]) if len(nums) == 2 else tuple(nums)
    if inc == 0:
        return 1
    values = range(first, last + (1 if inc > 0 else -1), inc)
    io.stdout.write("".join(f"{v}\n" for v in list(values)[:100000]))
    return 0


@applet("kill")
def kill(sh: Shell, argv: list[str], io: IO) -> int:
    # Signals are not delivered to simulated processes: say so the way a denied kill would.
    pids = [a for a in argv[1:] if not a.startswith("-")]
    for pid in pids:
        sh.err(io, f"sh: can't kill pid {pid}: Operation not permitted")
    return 1 if pids else 0
