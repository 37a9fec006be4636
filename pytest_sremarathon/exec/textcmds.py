"""File and text applets: cat, ls, head, tail, grep, wc, sort, uniq, cut, tr, base64, gzip
(gunzip, zcat), tee, basename, dirname. Messages and exit codes as busybox prints them."""

from __future__ import annotations

import base64 as b64
import gzip as gz
import posixpath
import re
import stat
import zlib
from collections.abc import Iterator
from typing import Optional

from .shell import FS, IO, FSError, Shell, applet


def _split_opts(argv: list[str], with_value: str = "") -> tuple[list[tuple[str, str]], list[str]]:
    """getopt-style: clustered short flags, ``with_value`` letters take an argument."""
    opts: list[tuple[str, str]] = []
    rest: list[str] = []
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest.extend(args[i + 1:])
            break
        if a.startswith("-") and len(a) > 1 and not re.fullmatch(r"-\d+", a):
            j = 1
            while j < len(a):
                ch = a[j]
                if ch in with_value:
                    value = a[j + 1:]
                    if not value:
                        i += 1
                        value = args[i] if i < len(args) else ""
                    opts.append((ch, value))
                    break
                opts.append((ch, ""))
                j += 1
        else:
            rest.append(a)
        i += 1
    return opts, rest


def _inputs(sh: Shell, names: list[str], io: IO, prog: str) -> Iterator[tuple[str, Optional[bytes]]]:
    """(name, content) per input; content None after an error was printed."""
    for name in names or ["-"]:
        if name == "-":
            yield name, io.stdin.read()
            continue
        try:
            yield name, sh.files.read(sh.path(name))
        except FSError as e:
            if str(e) == "Is a directory":
                sh.err(io, f"{prog}: read error: Is a directory")
            else:
                sh.err(io, f"{prog}: can't open '{name}': {e}")
            yield name, None


@applet("cat")
def cat(sh: Shell, argv: list[str], io: IO) -> int:
    opts, names = _split_opts(argv)
    number = any(o == "n" for o, _ in opts)
    if names in ([], ["-"]) and not number:
        # Standard input as it comes, not at its end: `kubectl exec -i … -- cat` echoes each
        # line while the session is open (until the client closes stdin).
        while chunk := io.stdin.read1(65536):
            io.stdout.write(chunk)
        return 0
    status = 0
    for _, data in _inputs(sh, names, io, "cat"):
        if data is None:
            status = 1
            continue
        if number:
            lines = data.decode("utf-8", "replace").splitlines(keepends=True)
            data = "".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(lines)).encode()
        io.stdout.write(data)
    return status


def _mode(fs: FS, p: str) -> str:
    if fs.is_dir(p):
        return stat.filemode(0o040755)
    if p.startswith("/dev/"):
        return stat.filemode(0o020666)
    return stat.filemode(0o100644)


@applet("ls")
def ls(sh: Shell, argv: list[str], io: IO) -> int:
    opts, names = _split_opts(argv)
    flags = {o for o, _ in opts}
    long_, all_, almost, one = "l" in flags, "a" in flags, "A" in flags, "1" in flags
    dir_only = "d" in flags
    status = 0
    fs = sh.files
    stamp = sh.now().strftime("%b %e %H:%M")
    files: list[str] = []
    dirs: list[str] = []
    for name in names or ["."]:
        p = sh.path(name)
        if not fs.exists(p):
            sh.err(io, f"ls: {name}: No such file or directory")
            status = 1
        elif fs.is_dir(p) and not dir_only:
            dirs.append(name)
        else:
            files.append(name)

    def line(label: str, p: str) -> str:
        if not long_:
            return label
        size = fs.size(p)
        return f"{_mode(fs, p)} {2 if fs.is_dir(p) else 1:>4} {'root':<8} {'root':<8} {size:>9} {stamp} {label}"

    def emit(entries: list[tuple[str, str]]) -> None:
        if not entries:
            return
        if long_ or one or not sh.tty:
            io.stdout.write("".join(line(label, p) + "\n" for label, p in entries))
        else:
            io.stdout.write("  ".join(label for label, _ in entries) + "\n")

    emit([(n, sh.path(n)) for n in sorted(files)])
    for i, name in enumerate(sorted(dirs)):
        p = sh.path(name)
        entries = fs.listdir(p)
        if not (all_ or almost):
            entries = [e for e in entries if not e.startswith(".")]
        shown = [(e, posixpath.join(p, e)) for e in entries]
        if all_:
            shown = [(".", p), ("..", posixpath.dirname(p) or "/")] + shown
        if len(names) > 1 or files:
            io.stdout.write(("\n" if i or files else "") + f"{name}:\n")
        if long_:
            io.stdout.write(f"total {len(shown) * 4}\n")
        emit(shown)
    return status


def _count(opts: list[tuple[str, str]], default: int, sh: Shell, io: IO, prog: str) -> Optional[tuple[str, int, bool]]:
    """(unit 'n' or 'c', count, from_start for tail's +N)."""
    unit, n, plus = "n", default, False
    for o, v in opts:
        if o in ("n", "c"):
            unit = o
            plus = v.startswith("+")
            try:
                n = abs(int(v))
            except ValueError:
                sh.err(io, f"{prog}: invalid number '{v}'")
                return None
    return unit, n, plus


def _legacy_count(argv: list[str]) -> list[str]:
    # "head -5" means "head -n 5"
    return [argv[0]] + [f"-n{a[1:]}" if re.fullmatch(r"-\d+", a) else a for a in argv[1:]]


def _head_tail(sh: Shell, argv: list[str], io: IO, tail: bool) -> int:
    prog = argv[0]
    opts, names = _split_opts(_legacy_count(argv), with_value="nc")
    c = _count(opts, 10, sh, io, prog)
    if c is None:
        return 1
    unit, n, plus = c
    quiet = any(o == "q" for o, _ in opts)
    status = 0
    many = len(names) > 1 and not quiet
    for k, (name, data) in enumerate(_inputs(sh, names, io, prog)):
        if data is None:
            status = 1
            continue
        if many:
            io.stdout.write(("\n" if k else "") + f"==> {name if name != '-' else 'standard input'} <==\n")
        if unit == "c":
            part = (data[n - 1:] if plus else data[-n:] if n else b"") if tail else data[:n]
        else:
            lines = data.splitlines(keepends=True)
            if tail:
                part = b"".join(lines[max(n - 1, 0):] if plus else lines[-n:] if n else [])
            else:
                part = b"".join(lines[:n])
        io.stdout.write(part)
    return status


@applet("head")
def head(sh: Shell, argv: list[str], io: IO) -> int:
    return _head_tail(sh, argv, io, tail=False)


@applet("tail")
def tail(sh: Shell, argv: list[str], io: IO) -> int:
    # tail -f prints what is there and ends: a simulated file never grows during an exec.
    return _head_tail(sh, argv, io, tail=True)


_BRE_SPECIAL = {"\\(": "(", "\\)": ")", "\\{": "{", "\\}": "}", "\\|": "|", "\\+": "+", "\\?": "?"}


def bre_to_python(pattern: str) -> str:
    """POSIX basic regex -> Python: ``\\( \\) \\{ \\} \\| \\+ \\?`` are operators, the bare
    characters literal (busybox's regcomp takes GNU's ``\\|``, ``\\+`` and ``\\?`` too)."""
    out: list[str] = []
    i = 0
    in_bracket = False
    while i < len(pattern):
        c = pattern[i]
        if in_bracket:
            out.append("\\\\" if c == "\\" else c)
            if c == "]" and out[-2:-1] != ["["] and out[-3:-1] != ["[", "^"]:
                in_bracket = False
            i += 1
            continue
        two = pattern[i:i + 2]
        if two in _BRE_SPECIAL:
            out.append(_BRE_SPECIAL[two])
            i += 2
            continue
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]) if not pattern[i + 1].isalnum() else "\\" + pattern[i + 1])
            i += 2
            continue
        if c in "(){}|+?":
            out.append("\\" + c)
        elif c == "[":
            in_bracket = True
            out.append(c)
        elif c == "*" and (not out or out[-1] in ("(", "|", "^")):
            out.append("\\*")  # a leading * is literal in a BRE
        else:
            out.append(c)
        i += 1
    return "".join(out)


@applet("grep", "egrep", "fgrep")
def grep(sh: Shell, argv: list[str], io: IO) -> int:
    opts, rest = _split_opts(argv, with_value="emA")
    flags = {o for o, _ in opts}
    patterns = [v for o, v in opts if o == "e"]
    if not patterns:
        if not rest:
            sh.err(io, "BusyBox v1.36.1 multi-call binary.\n\nUsage: grep [-HhnlLoqvsrRiwFExz] [-m N] "
                       "[-A|B|C N] { PATTERN | -e PATTERN... | -f FILE... } [FILE]...")
            return 2
        patterns = [rest.pop(0)]
    patterns = [p for pat in patterns for p in pat.split("\n")]
    mode = "F" if "F" in flags or argv[0] == "fgrep" else "E" if "E" in flags or argv[0] == "egrep" else "G"
    try:
        sources = [re.escape(p) if mode == "F" else p if mode == "E" else bre_to_python(p) for p in patterns]
        if "w" in flags:
            sources = [rf"(?<!\w)(?:{s})(?!\w)" for s in sources]
        if "x" in flags:
            sources = [rf"(?:{s})\Z" for s in sources]
        rx = re.compile("|".join(f"(?:{s})" for s in sources), re.IGNORECASE if "i" in flags else 0)
    except re.error as e:
        sh.err(io, f"grep: bad regex '{patterns[0]}': {e}")
        return 2
    limit = next((int(v) for o, v in opts if o == "m" and v.isdigit()), None)
    names = rest
    show_name = ("H" in flags or len(names) > 1) and "h" not in flags
    matched_any = False
    status_err = False
    for name, data in _inputs(sh, names, io, "grep"):
        if data is None:
            if "s" in flags:
                pass
            status_err = True
            continue
        label = "(standard input)" if name == "-" else name
        count = 0
        for no, raw in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            m = rx.match(raw) if "x" in flags else rx.search(raw)
            if (m is not None) == ("v" in flags):
                continue
            count += 1
            matched_any = True
            if "q" in flags:
                return 0
            if "l" in flags or "c" in flags:
                if limit is not None and count >= limit:
                    break
                continue
            prefix = (f"{label}:" if show_name else "") + (f"{no}:" if "n" in flags else "")
            if "o" in flags and "v" not in flags:
                for mm in rx.finditer(raw):
                    if mm.group(0):
                        io.stdout.write(prefix + mm.group(0) + "\n")
            else:
                io.stdout.write(prefix + raw + "\n")
            if limit is not None and count >= limit:
                break
        if "l" in flags and count:
            io.stdout.write(label + "\n")
        elif "c" in flags:
            io.stdout.write((f"{label}:" if show_name else "") + f"{count}\n")
    if status_err and not ("q" in flags and matched_any):
        return 2
    return 0 if matched_any else 1


@applet("wc")
def wc(sh: Shell, argv: list[str], io: IO) -> int:
    opts, names = _split_opts(argv)
    flags = [o for o, _ in opts if o in "lwcm"] or ["l", "w", "c"]
    order = [f for f in "lwcm" if f in flags]
    status = 0
    totals = {f: 0 for f in order}
    rows: list[tuple[list[int], str]] = []
    for name, data in _inputs(sh, names, io, "wc"):
        if data is None:
            status = 1
            continue
        counts = {"l": data.count(b"\n"), "w": len(data.split()), "c": len(data),
                  "m": len(data.decode("utf-8", "replace"))}
        rows.append(([counts[f] for f in order], "" if name == "-" else name))
        for f in order:
            totals[f] += counts[f]
    if len(rows) > 1:
        rows.append(([totals[f] for f in order], "total"))
    for values, label in rows:
        if len(order) == 1 and len(rows) == 1:
            text = str(values[0])  # one count of one input: busybox prints it unpadded
        else:
            text = " ".join(f"{v:>9}" for v in values)
        io.stdout.write(text + (f" {label}" if label else "") + "\n")
    return status


@applet("sort")
def sort(sh: Shell, argv: list[str], io: IO) -> int:
    opts, names = _split_opts(argv, with_value="kt")
    flags = {o for o, _ in opts}
    key = next((v for o, v in opts if o == "k"), None)
    sep = next((v for o, v in opts if o == "t"), None)
    lines: list[str] = []
    status = 0
    for _, data in _inputs(sh, names, io, "sort"):
        if data is None:
            status = 1
            continue
        lines.extend(data.decode("utf-8", "replace").splitlines())

    def field_of(line: str) -> str:
        if key is None:
            return line
        n = int(re.match(r"\d+", key).group(0)) if re.match(r"\d+", key) else 1  # type: ignore[union-attr]
        parts = line.split(sep) if sep else line.split()
        return " ".join(parts[n - 1:]) if n - 1 < len(parts) else ""

    def numeric(s: str) -> float:
        m = re.match(r"\s*(-?\d+(?:\.\d+)?)", s)
        return float(m.group(1)) if m else 0.0

    if "n" in flags:
        lines.sort(key=lambda ln: (numeric(field_of(ln)), ln), reverse="r" in flags)
    else:
        lines.sort(key=lambda ln: (field_of(ln).lower(), ln) if "f" in flags else (field_of(ln), ln),
                   reverse="r" in flags)
    if "u" in flags:
        seen: set[str] = set()
        lines = [ln for ln in lines if not (field_of(ln) in seen or seen.add(field_of(ln)))]  # type: ignore[func-returns-value]
    io.stdout.write("".join(ln + "\n" for ln in lines))
    return status


@applet("uniq")
def uniq(sh: Shell, argv: list[str], io: IO) -> int:
    opts, names = _split_opts(argv)
    flags = {o for o, _ in opts}
    data = next(iter(_inputs(sh, names[:1], io, "uniq")))[1]
    if data is None:
        return 1
    groups: list[tuple[str, int]] = []
    for line in data.decode("utf-8", "replace").splitlines():
        if groups and groups[-1][0] == line:
            groups[-1] = (line, groups[-1][1] + 1)
        else:
            groups.append((line, 1))
    for line, n in groups:
        if ("d" in flags and n < 2) or ("u" in flags and n > 1):
            continue
        io.stdout.write((f"{n:>7} " if "c" in flags else "") + line + "\n")
    return 0


def _ranges(spec: str) -> list[tuple[int, int]]:
    out = []
    for part in spec.split(","):
        a, dash, b = part.partition("-")
        lo = int(a) if a else 1
        hi = (int(b) if b else 1 << 30) if dash else lo
        out.append((lo, hi))
    return out


@applet("cut")
def cut(sh: Shell, argv: list[str], io: IO) -> int:
    opts, names = _split_opts(argv, with_value="dfc")
    o = dict(opts)
    delim = o.get("d", "\t") or "\t"
    try:
        spec = _ranges(o.get("f") or o.get("c") or "")
    except ValueError:
        sh.err(io, "cut: invalid byte, character or field list")
        return 1
    if not spec:
        sh.err(io, "cut: expected a list of bytes, characters, or fields")
        return 1
    status = 0
    for _, data in _inputs(sh, names, io, "cut"):
        if data is None:
            status = 1
            continue
        for line in data.decode("utf-8", "replace").splitlines():
            if "f" in o:
                if delim not in line:
                    io.stdout.write(line + "\n")
                    continue
                parts = line.split(delim)
                picked = [p for i, p in enumerate(parts, 1) if any(lo <= i <= hi for lo, hi in spec)]
                io.stdout.write(delim.join(picked) + "\n")
            else:
                io.stdout.write("".join(ch for i, ch in enumerate(line, 1) if any(lo <= i <= hi for lo, hi in spec))
                                + "\n")
    return status


def _tr_set(s: str) -> str:
    s = s.replace("[:lower:]", "a-z").replace("[:upper:]", "A-Z").replace("[:digit:]", "0-9") \
         .replace("[:space:]", " \t\n\r\f\v").replace("[:alpha:]", "a-zA-Z").replace("[:alnum:]", "a-zA-Z0-9")
    s = s.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r")
    out: list[str] = []
    i = 0
    while i < len(s):
        if i + 2 < len(s) and s[i + 1] == "-":
            out.extend(chr(c) for c in range(ord(s[i]), ord(s[i + 2]) + 1))
            i += 3
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


@applet("tr")
def tr(sh: Shell, argv: list[str], io: IO) -> int:
    opts, sets = _split_opts(argv)
    flags = {o for o, _ in opts}
    text = io.stdin.read().decode("utf-8", "replace")
    if not sets:
        sh.err(io, "tr: missing operand")
        return 1
    a = _tr_set(sets[0])
    if "d" in flags:
        text = "".join(c for c in text if c not in a)
    elif len(sets) > 1:
        b = _tr_set(sets[1])
        b = b + b[-1:] * (len(a) - len(b)) if b else ""
        text = text.translate({ord(x): y for x, y in zip(a, b)})
    if "s" in flags:
        squeeze = _tr_set(sets[-1])
        text = re.sub("([" + re.escape(squeeze) + "])\\1+", r"\1", text) if squeeze else text
    io.stdout.write(text)
    return 0


@applet("base64")
def base64(sh: Shell, argv: list[str], io: IO) -> int:
    opts, names = _split_opts(argv)
    decode = any(o == "d" for o, _ in opts)
    data = next(iter(_inputs(sh, names[:1], io, "base64")))[1]
    if data is None:
        return 1
    if decode:
        try:
            io.stdout.write(b64.b64decode(b"".join(data.split()), validate=True))
        except ValueError:
            sh.err(io, "base64: invalid input")
            return 1
        return 0
    enc = b64.b64encode(data).decode()
    io.stdout.write("".join(enc[i:i + 76] + "\n" for i in range(0, len(enc), 76)) or "\n")
    return 0


@applet("gzip", "gunzip", "zcat")
def gzip(sh: Shell, argv: list[str], io: IO) -> int:
    """``gzip [-cdf] [FILE]…``: standard input to standard output, or each FILE to FILE.gz (and
    back with ``-d``; the original stays, as the container's own files are read-only); ``zcat``
    is ``gzip -dc``. A zero mtime, as busybox writes for a pipe: the same input, the same bytes."""
    prog = posixpath.basename(argv[0])
    opts, names = _split_opts(argv)
    flags = {o for o, _ in opts}
    decompress = "d" in flags or prog in ("gunzip", "zcat")
    to_stdout = "c" in flags or prog == "zcat" or not names
    status = 0
    for name, data in _inputs(sh, names, io, prog):
        if data is None:
            status = 1
            continue
        try:
            out = gz.decompress(data) if decompress else gz.compress(data, mtime=0)
        except (OSError, EOFError, zlib.error):
            sh.err(io, f"{prog}: invalid magic")
            status = 1
            continue
        if to_stdout or name == "-":
            io.stdout.write(out)
            continue
        target = (name[:-3] if name.endswith(".gz") else name + ".out") if decompress else name + ".gz"
        try:
            sh.files.write(sh.path(target), out)
        except FSError as e:
            sh.err(io, f"{prog}: {target}: {e}")
            status = 1
    return status


@applet("tee")
def tee(sh: Shell, argv: list[str], io: IO) -> int:
    opts, names = _split_opts(argv)
    append = any(o == "a" for o, _ in opts)
    data = io.stdin.read()
    io.stdout.write(data)
    status = 0
    for name in names:
        try:
            sh.files.write(sh.path(name), data, append=append)
        except FSError as e:
            sh.err(io, f"tee: {name}: {e}")
            status = 1
    return status


@applet("basename")
def basename(sh: Shell, argv: list[str], io: IO) -> int:
    if len(argv) < 2:
        sh.err(io, "basename: missing operand")
        return 1
    name = posixpath.basename(argv[1].rstrip("/")) or "/"
    if len(argv) > 2 and name.endswith(argv[2]) and name != argv[2]:
        name = name[: -len(argv[2])]
    io.stdout.write(name + "\n")
    return 0


@applet("dirname")
def dirname(sh: Shell, argv: list[str], io: IO) -> int:
    if len(argv) < 2:
        sh.err(io, "dirname: missing operand")
        return 1
    io.stdout.write((posixpath.dirname(argv[1].rstrip("/")) or ".") + "\n")
    return 0
