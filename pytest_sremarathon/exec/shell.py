"""A small busybox-like shell over a :class:`~.view.ContainerView`.

``run_exec(view, argv, stdin, stdout, stderr, tty=…)`` is what an exec runs: ``argv`` as the
client sent it (``["sh", "-c", "…"]``, ``["env"]``, ``["sh"]`` for an interactive shell). It is
deterministic: no wall clock, no randomness, no host file or network access; time passes only
on the shell's own virtual clock (``sleep``, network latency), which starts at ``view.now()``.

Messages and exit codes follow busybox ash and its applets (what the busybox, alpine and
curlimages/curl images run); the commands themselves are in :mod:`.textcmds` and
:mod:`.netcmds`, the builtins here.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import posixpath
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Optional, Protocol, Union

from .parse import (
    AndOr,
    Command,
    For,
    Group,
    If,
    Incomplete,
    Pipeline,
    Redir,
    Seg,
    Seq,
    ShSyntaxError,
    Simple,
    While,
    Word,
    parse,
    parse_word,
)
from .view import ContainerView


class In(Protocol):
    def read(self, n: int = -1) -> bytes: ...

    def read1(self, n: int = 65536) -> bytes: ...  # what is there now (b"" only at the end)

    def readline(self) -> bytes: ...


class Out(Protocol):
    def write(self, data: Union[bytes, str]) -> int: ...


class BufIn:
    def __init__(self, data: bytes = b"") -> None:
        self._data = data
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else min(len(self._data), self._pos + n)
        out = self._data[self._pos:end]
        self._pos = end
        return out

    def read1(self, n: int = 65536) -> bytes:
        return self.read(n)

    def readline(self) -> bytes:
        i = self._data.find(b"\n", self._pos)
        end = len(self._data) if i < 0 else i + 1
        out = self._data[self._pos:end]
        self._pos = end
        return out


class Readable(Protocol):
    def read(self, n: int = -1) -> bytes: ...

    def readline(self) -> bytes: ...


class StreamIn:
    """Adapts :class:`~.channels.InputStream` (or any ``read``/``readline`` object)."""

    def __init__(self, stream: Readable) -> None:
        self._s = stream

    def read(self, n: int = -1) -> bytes:
        return bytes(self._s.read(n))

    def read1(self, n: int = 65536) -> bytes:
        read1 = getattr(self._s, "read1", None)
        return bytes(read1(n) if read1 is not None else self._s.read(n))

    def readline(self) -> bytes:
        return bytes(self._s.readline())


class BufOut:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: Union[bytes, str]) -> int:
        self.data += data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        return len(data)


class NullOut:
    def write(self, data: Union[bytes, str]) -> int:
        return len(data)


@functools.lru_cache(maxsize=512)
def _parse_script(src: str) -> Seq:
    """:func:`parse`, once per distinct script text for every shell: the tree is frozen
    (immutable dataclasses and tuples), and the same scripts run again and again in new shells
    (a CronJob's busybox command, init containers, a restarted utility container's main
    process). A syntax error is not kept: it is raised again, the same, each time."""
    return parse(src)


@dataclass
class IO:
    stdin: In
    stdout: Out
    stderr: Out


class ShellExit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Break(Exception):
    def __init__(self, n: int, cont: bool) -> None:
        super().__init__(n)
        self.n = n
        self.cont = cont


class FSError(Exception):
    pass


# The directories every image here has (a busybox/alpine root), besides those implied by files.
SKELETON = frozenset({"/", "/bin", "/dev", "/etc", "/home", "/lib", "/media", "/mnt", "/opt", "/proc", "/root",
                      "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/local",
                      "/usr/local/bin", "/usr/sbin", "/var", "/var/log", "/var/run"})
LOOP_LIMIT = 10000  # iterations of one while/until loop
TIME_LIMIT = 3600.0  # virtual seconds an exec may spend before its loops are stopped
_FOREVER = 1e9  # virtual seconds that stand for "never ends" (`sleep infinity`) on the shell's clock
BIN_DIRS = ("/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin")
_GLOB = set("*?[")


class FS:
    """The container's files (read-only) plus what this exec wrote (an overlay that lives as
    long as the exec: a container's root file system is writable, its mounts here are not)."""

    def __init__(self, view: ContainerView) -> None:
        self.files = dict(view.files)
        if "/etc/hostname" not in self.files:
            self.files["/etc/hostname"] = (view.hostname + "\n").encode()
        self.overlay: dict[str, bytes] = {}
        self.dirs = set(SKELETON) | set(getattr(view, "dirs", ()) or ())
        for path in self.files:
            self._add_parents(path)

    def _add_parents(self, path: str) -> None:
        d = posixpath.dirname(path)
        while d not in self.dirs:
            self.dirs.add(d)
            d = posixpath.dirname(d)

    @staticmethod
    def norm(path: str, cwd: str) -> str:
        return posixpath.normpath(posixpath.join(cwd, path)).replace("//", "/") if path else cwd

    def is_file(self, p: str) -> bool:
        return p in self.overlay or p in self.files or p in ("/dev/null", "/dev/zero")

    def is_dir(self, p: str) -> bool:
        return p in self.dirs

    def exists(self, p: str) -> bool:
        return self.is_file(p) or self.is_dir(p)

    def read(self, p: str) -> bytes:
        if p in self.overlay:
            return self.overlay[p]
        if p in self.files:
            return self.files[p]
        if p in ("/dev/null", "/dev/zero"):
            return b""
        if p in self.dirs:
            raise FSError("Is a directory")
        raise FSError("No such file or directory")

    def size(self, p: str) -> int:
        return len(self.read(p)) if self.is_file(p) else 4096

    def listdir(self, p: str) -> list[str]:
        if not self.is_dir(p):
            raise FSError("Not a directory" if self.is_file(p) else "No such file or directory")
        prefix = p.rstrip("/") + "/"
        names = {q[len(prefix):].split("/", 1)[0] for q in (*self.files, *self.overlay, *self.dirs)
                 if q.startswith(prefix) and q != prefix}
        return sorted(n for n in names if n)

    def write(self, p: str, data: bytes, append: bool = False) -> None:
        if p == "/dev/null":
            return
        if p in self.files and p not in self.overlay:
            raise FSError("Read-only file system")
        if p in self.dirs:
            raise FSError("Is a directory")
        if posixpath.dirname(p) not in self.dirs:
            raise FSError("nonexistent directory")
        self.overlay[p] = (self.overlay.get(p, b"") if append else b"") + data

    def glob(self, pattern: str, cwd: str) -> list[str]:
        absolute = pattern.startswith("/")
        parts = [c for c in pattern.split("/") if c]
        found = ["/" if absolute else ""]
        for part in parts:
            nxt: list[str] = []
            for base in found:
                real = self.norm(base or ".", cwd)
                if any(c in _GLOB for c in part):
                    try:
                        names = self.listdir(real)
                    except FSError:
                        continue
                    for n in names:
                        if n.startswith(".") and not part.startswith("."):
                            continue  # a leading dot must be matched explicitly
                        if fnmatch.fnmatchcase(n, part):
                            nxt.append(posixpath.join(base, n) if base else n)
                else:
                    cand = posixpath.join(base, _unescape(part)) if base else _unescape(part)
                    if self.exists(self.norm(cand, cwd)):
                        nxt.append(cand)
            found = nxt
        return sorted(found)


def _glob_escape(s: str) -> str:
    return "".join(f"[{c}]" if c in _GLOB else c for c in s)


def _unescape(part: str) -> str:
    # a non-glob component may still hold our [x] escapes
    out, i = [], 0
    while i < len(part):
        if part[i] == "[" and i + 2 < len(part) and part[i + 2] == "]":
            out.append(part[i + 1])
            i += 3
        else:
            out.append(part[i])
            i += 1
    return "".join(out)


CommandFn = Callable[["Shell", list[str], IO], int]
# Applets: programs in the image (subject to view.commands); registered by textcmds/netcmds.
APPLETS: dict[str, CommandFn] = {}
# Builtins of ash: always there once a shell runs.
BUILTINS: dict[str, CommandFn] = {}


def applet(*names: str) -> Callable[[CommandFn], CommandFn]:
    def deco(fn: CommandFn) -> CommandFn:
        for n in names:
            APPLETS[n] = fn
        return fn
    return deco


def builtin(*names: str) -> Callable[[CommandFn], CommandFn]:
    def deco(fn: CommandFn) -> CommandFn:
        for n in names:
            BUILTINS[n] = fn
        return fn
    return deco


@dataclass
class Shell:
    """One shell process (with its subshells): variables, cwd, the virtual clock offset."""

    view: ContainerView
    tty: bool = False
    fs: Optional[FS] = None
    vars: dict[str, str] = field(default_factory=dict)
    exported: set[str] = field(default_factory=set)
    params: list[str] = field(default_factory=list)
    name: str = "sh"
    cwd: str = "/"
    status: int = 0
    elapsed: float = 0.0  # virtual seconds this exec has spent (sleep, network)
    pid: int = 0
    errexit: bool = False
    xtrace: bool = False
    stderr_sink: Out = field(default_factory=NullOut)  # where $(…) sends its stderr
    status_of_subst: Optional[int] = None
    _cache: dict[str, Seq] = field(default_factory=dict)
    # Set (shared with the subshells) when the runaway-loop guard stopped this exec: a container's
    # main process that would have run on (``while true; do …; done``), see ``run.run_process``.
    stopped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.fs is None:
            self.fs = FS(self.view)
        if not self.vars:
            self.vars = dict(self.view.env)
            self.exported = set(self.vars)
        self.cwd = getattr(self.view, "workdir", None) or "/"
        if not self.pid:
            self.pid = max((p.pid for p in self.view.processes), default=0) + 6

    # -- services for commands ---------------------------------------------------------------
    @property
    def files(self) -> FS:
        assert self.fs is not None
        return self.fs

    def now(self) -> datetime:
        t = self.view.now()
        if t.tzinfo is None:
            t = t.replace(tzinfo=timezone.utc)
        return t + timedelta(seconds=min(self.elapsed, _FOREVER))

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self.elapsed += seconds

    def path(self, p: str) -> str:
        return self.files.norm(p, self.cwd)

    def available(self, name: str) -> bool:
        cmds = self.view.commands
        return name in APPLETS and (cmds is None or name in cmds)

    def environ(self) -> dict[str, str]:
        return {k: v for k, v in self.vars.items() if k in self.exported}

    @staticmethod
    def err(io: IO, msg: str) -> None:
        io.stderr.write(msg if msg.endswith("\n") else msg + "\n")

    # -- running ---------------------------------------------------------------------------------
    def run_script(self, src: str, io: IO) -> int:
        try:
            tree = self._cache.get(src)
            if tree is None:
                tree = self._cache[src] = _parse_script(src)
        except ShSyntaxError as e:
            self.err(io, f"{self.name}: syntax error: {e}")
            self.status = 2
            return 2
        return self.seq(tree, io)

    def seq(self, node: Seq, io: IO, condition: bool = False) -> int:
        for item in node.items:
            self.status = self.and_or(item, io, condition)
            if self.errexit and self.status != 0 and not condition and not item.rest \
                    and not item.first.negate:
                raise ShellExit(self.status)
        return self.status

    def and_or(self, node: AndOr, io: IO, condition: bool = False) -> int:
        status = self.pipeline(node.first, io)
        for op, pipe in node.rest:
            if (op == "&&") == (status == 0):
                status = self.pipeline(pipe, io)
        return status

    def pipeline(self, node: Pipeline, io: IO) -> int:
        if len(node.cmds) == 1:
            status = self.command(node.cmds[0], io)
        else:
            stdin: In = io.stdin
            status = 0
            for i, cmd in enumerate(node.cmds):
                last = i == len(node.cmds) - 1
                out: Out = io.stdout if last else BufOut()
                status = self.subshell(lambda sub: sub.command(cmd, IO(stdin, out, io.stderr)))  # noqa: B023 - run now
                if not last:
                    assert isinstance(out, BufOut)
                    stdin = BufIn(bytes(out.data))
        self.status = (1 if status == 0 else 0) if node.negate else status
        return self.status

    def subshell(self, fn: Callable[[Shell], int]) -> int:
        """Run ``fn`` on a copy of this shell (variables, cwd); files and time are shared."""
        sub = Shell(self.view, tty=self.tty, fs=self.fs, vars=dict(self.vars), exported=set(self.exported),
                    params=list(self.params), name=self.name, status=self.status, elapsed=self.elapsed,
                    pid=self.pid, errexit=self.errexit, xtrace=self.xtrace, stderr_sink=self.stderr_sink,
                    _cache=self._cache, stopped=self.stopped)
        sub.cwd = self.cwd
        try:
            code = fn(sub)
        except ShellExit as e:
            code = e.code
        except _Break:
            code = 0
        self.elapsed = sub.elapsed
        return code

    def command(self, node: Command, io: IO) -> int:
        if isinstance(node, Simple):
            return self.simple(node, io)
        try:
            io2 = self.redirect(node.redirs, io)
        except FSError as e:
            self.err(io, f"{self.name}: {e}")
            return 1
        if isinstance(node, If):
            for cond, body in node.branches:
                if self.seq(cond, io2, condition=True) == 0:
                    return self.seq(body, io2)
            return self.seq(node.otherwise, io2) if node.otherwise else 0
        if isinstance(node, For):
            items = self.expand_words(node.words) if node.words is not None else list(self.params)
            status = 0
            for item in items:
                self.vars[node.var] = item
                try:
                    status = self.seq(node.body, io2)
                except _Break as b:
                    if b.n > 1:
                        raise _Break(b.n - 1, b.cont) from None
                    if not b.cont:
                        break
            return status
        if isinstance(node, While):
            status = 0
            for n in range(LOOP_LIMIT + 1):
                if n == LOOP_LIMIT or self.elapsed > TIME_LIMIT:
                    # `while true; do curl …; sleep 1; done` would run until the client gives up;
                    # an exec here has no wall clock to give up on, so runaway loops are killed.
                    self.err(io, f"{self.name}: Killed (runaway loop stopped by the simulation after "
                                 f"{n} iterations, {int(min(self.elapsed, _FOREVER))} s of virtual time)")
                    self.stopped.append("runaway loop")
                    raise ShellExit(137)
                if (self.seq(node.cond, io2, condition=True) == 0) == node.until:
                    break
                try:
                    status = self.seq(node.body, io2)
                except _Break as b:
                    if b.n > 1:
                        raise _Break(b.n - 1, b.cont) from None
                    if not b.cont:
                        break
            return status
        assert isinstance(node, Group)
        if node.subshell:
            return self.subshell(lambda sub: sub.seq(node.body, io2))
        return self.seq(node.body, io2)

    def simple(self, node: Simple, io: IO) -> int:
        self.status_of_subst = None
        assigns = [(name, self.expand_word(w, split=False, glob=False)) for name, w in node.assigns]
        argv = self.expand_words(node.words)
        try:
            io2 = self.redirect(node.redirs, io)
        except FSError as e:
            self.err(io, f"{self.name}: {e}")
            return 1
        if not argv:
            for name, value in assigns:
                self.vars[name] = value[0] if value else ""
            return self.status_of_subst or 0
        if self.xtrace:
            io.stderr.write("+ " + " ".join(argv) + "\n")
        env_over = {name: (value[0] if value else "") for name, value in assigns}
        name = argv[0]
        if name in BUILTINS:
            saved = {k: self.vars.get(k) for k in env_over}
            self.vars.update(env_over)
            try:
                return BUILTINS[name](self, argv, io2)
            finally:
                if name not in ("export", "unset", "set", "cd", "read", "eval", "."):
                    for k, v in saved.items():
                        if v is None:
                            self.vars.pop(k, None)
                        else:
                            self.vars[k] = v
        return self.run_program(argv, io2, env_over)

    def lookup(self, name: str) -> tuple[Optional[CommandFn], int, str]:
        """The applet ``name`` runs (or None, the exit code and message if it does not)."""
        aliases = getattr(self.view, "aliases", None) or {}
        if "/" in name:
            p = self.path(name)
            base = posixpath.basename(p)
            if posixpath.dirname(p) in BIN_DIRS and base in aliases and self.available(aliases[base]):
                return APPLETS[aliases[base]], 0, ""
            if posixpath.dirname(p) in BIN_DIRS and self.available(base):
                return APPLETS[base], 0, ""
            if self.files.is_dir(p):
                return None, 126, f"{self.name}: {name}: Permission denied"
            if self.files.is_file(p):
                return None, 126, f"{self.name}: {name}: Permission denied"
            return None, 127, f"{self.name}: {name}: not found"
        if self.available(name):
            return APPLETS[name], 0, ""
        if name in aliases and self.available(aliases[name]):
            return APPLETS[aliases[name]], 0, ""
        return None, 127, f"{self.name}: {name}: not found"

    def run_program(self, argv: list[str], io: IO, env_over: Optional[dict[str, str]] = None) -> int:
        fn, code, msg = self.lookup(argv[0])
        if fn is None:
            self.err(io, msg)
            return code
        argv = [posixpath.basename(argv[0])] + argv[1:]
        if not env_over:
            return fn(self, argv, io)

        def with_env(sub: Shell) -> int:
            sub.vars.update(env_over or {})
            sub.exported |= set(env_over or {})
            assert fn is not None
            return fn(sub, argv, io)
        return self.subshell(with_env)

    def redirect(self, redirs: Sequence[Redir], io: IO) -> IO:
        if not redirs:
            return io
        fds: dict[int, Union[In, Out]] = {0: io.stdin, 1: io.stdout, 2: io.stderr}
        for r in redirs:
            target = " ".join(self.expand_word(r.target, glob=False))
            if r.op in (">&", "<&"):
                if target == "-":
                    fds[r.fd] = NullOut()
                elif target.isdigit() and int(target) in fds:
                    fds[r.fd] = fds[int(target)]
                else:
                    raise FSError(f"{target}: bad file descriptor" if target.isdigit() else f"{target}: bad number")
                continue
            p = self.path(target)
            if r.op == "<":
                if p == "/dev/stdin":
                    continue
                try:
                    fds[r.fd] = BufIn(self.files.read(p))
                except FSError as e:
                    raise FSError(f"can't open '{target}': {e}") from None
                continue
            if p == "/dev/null":
                fds[r.fd] = NullOut()
            elif p in ("/dev/stdout", "/proc/self/fd/1"):
                fds[r.fd] = fds[1]
            elif p in ("/dev/stderr", "/proc/self/fd/2"):
                fds[r.fd] = fds[2]
            else:
                try:
                    self.files.write(p, b"", append=r.op == ">>")
                except FSError as e:
                    raise FSError(f"can't create {target}: {e}") from None
                fds[r.fd] = _FileOut(self.files, p)
        stdin, stdout, stderr = fds[0], fds[1], fds[2]
        return IO(stdin, stdout, stderr)  # type: ignore[arg-type]

    # -- expansion ---------------------------------------------------------------------------------
    def expand_words(self, words: Iterable[Word]) -> list[str]:
        out: list[str] = []
        for w in words:
            out.extend(self.expand_word(w))
        return out

    def expand_word(self, word: Word, split: bool = True, glob: bool = True) -> list[str]:
        fields: list[list[tuple[str, bool]]] = [[]]
        for seg in word:
            if seg.kind == "lit":
                fields[-1].append((seg.text, True))
            elif seg.kind == "q":
                fields[-1].append((seg.text, False))
            elif seg.kind == "var" and seg.text == "@" and seg.quoted and not seg.op:
                for i, p in enumerate(self.params):
                    if i:
                        fields.append([])
                    fields[-1].append((p, False))
                if not self.params and len(word) == 1:
                    return []
            else:
                value = self.expand_seg(seg)
                if seg.quoted or not split:
                    fields[-1].append((value, False))
                    continue
                parts = value.split()
                if not parts:
                    if value and fields[-1]:
                        fields.append([])
                    continue
                if value[0].isspace() and fields[-1]:
                    fields.append([])
                fields[-1].append((parts[0], False))
                for p in parts[1:]:
                    fields.append([(p, False)])
                if value[-1].isspace():
                    fields.append([])
        out: list[str] = []
        for f in fields:
            if not f:
                continue
            text = "".join(t for t, _ in f)
            if glob and any(g and any(c in _GLOB for c in t) for t, g in f):
                pattern = "".join(t if g else _glob_escape(t) for t, g in f)
                matches = self.files.glob(pattern, self.cwd)
                if matches:
                    out.extend(matches)
                    continue
            out.append(text)
        return out

    def var(self, name: str) -> Optional[str]:
        if name == "?":
            return str(self.status)
        if name == "$":
            return str(self.pid)
        if name == "#":
            return str(len(self.params))
        if name in ("@", "*"):
            return " ".join(self.params)
        if name == "!":
            return ""
        if name.isdigit():
            n = int(name)
            if n == 0:
                return self.name
            return self.params[n - 1] if n <= len(self.params) else None
        if name == "PWD":
            return self.cwd
        return self.vars.get(name)

    def expand_seg(self, seg: Seg) -> str:
        if seg.kind == "cmd":
            return self.substitute(seg.text)
        if seg.kind == "arith":
            return str(self.arith(seg.text))
        value = self.var(seg.text)
        if seg.op == "#":
            return str(len(value or ""))
        if not seg.op:
            return value or ""
        unset = value is None or (seg.op.startswith(":") and value == "")
        op = seg.op.lstrip(":")
        if op == "+":
            return "" if unset else " ".join(self.expand_word(parse_word(seg.arg), split=False, glob=False))
        if not unset:
            return value or ""
        alt = " ".join(self.expand_word(parse_word(seg.arg), split=False, glob=False))
        if op == "=":
            self.vars[seg.text] = alt
        return alt

    def substitute(self, src: str) -> str:
        out = BufOut()
        code = self.subshell(lambda sub: sub.run_script(src, IO(BufIn(), out, self.stderr_sink)))
        self.status_of_subst = code
        self.status = code
        return bytes(out.data).decode("utf-8", "replace").rstrip("\n")

    def arith(self, expr: str) -> int:
        text = " ".join(self.expand_word(parse_word(expr), split=False, glob=False))
        try:
            tree = ast.parse(text.strip() or "0", mode="eval")
            return _arith(tree.body, self)
        except (SyntaxError, ValueError, ZeroDivisionError, KeyError) as e:
            raise FSError(f"arithmetic syntax error: {text}") from e


def _arith(node: ast.AST, sh: Shell) -> int:
    """Integer arithmetic on a Python AST, restricted to what ``$(( ))`` allows."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return int(node.value)
    if isinstance(node, ast.Name):
        text = sh.vars.get(node.id, "0") or "0"
        return int(text) if text.lstrip("-").isdigit() else 0
    if isinstance(node, ast.UnaryOp):
        n = _arith(node.operand, sh)
        if isinstance(node.op, ast.USub):
            return -n
        if isinstance(node.op, ast.Not):
            return int(not n)
        return n
    if isinstance(node, ast.BinOp):
        a, b = _arith(node.left, sh), _arith(node.right, sh)
        ops: dict[type, Callable[[int, int], int]] = {
            ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
            ast.Div: lambda x, y: int(x / y) if y else _div0(), ast.FloorDiv: lambda x, y: int(x / y) if y else _div0(),
            ast.Mod: lambda x, y: x - y * int(x / y) if y else _div0(), ast.Pow: lambda x, y: x ** y,
            ast.BitAnd: lambda x, y: x & y, ast.BitOr: lambda x, y: x | y, ast.LShift: lambda x, y: x << y,
            ast.RShift: lambda x, y: x >> y, ast.BitXor: lambda x, y: x ^ y}
        fn = ops.get(type(node.op))
        if fn is None:
            raise ValueError("operator")
        return fn(a, b)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        a, b = _arith(node.left, sh), _arith(node.comparators[0], sh)
        cmp: dict[type, Callable[[int, int], bool]] = {
            ast.Lt: lambda x, y: x < y, ast.LtE: lambda x, y: x <= y, ast.Gt: lambda x, y: x > y,
            ast.GtE: lambda x, y: x >= y, ast.Eq: lambda x, y: x == y, ast.NotEq: lambda x, y: x != y}
        f = cmp.get(type(node.ops[0]))
        if f is None:
            raise ValueError("comparison")
        return int(f(a, b))
    raise ValueError("expression")


def _div0() -> int:
    raise ZeroDivisionError


class _FileOut:
    def __init__(self, fs: FS, path: str) -> None:
        self.fs = fs
        self.path = path

    def write(self, data: Union[bytes, str]) -> int:
        raw = data.encode() if isinstance(data, str) else data
        self.fs.write(self.path, raw, append=True)
        return len(data)


# -- interactive use -------------------------------------------------------------------------------
def _prompt(sh: Shell) -> str:
    home = sh.vars.get("HOME", "")
    where = "~" + sh.cwd[len(home):] if home and home != "/" and (sh.cwd + "/").startswith(home + "/") else sh.cwd
    return f"{where} {'#' if sh.view.uid == 0 else '$'} "


class _LineEditor:
    """What ash's line editing does on a terminal in raw mode: echo, backspace, ^C, ^D."""

    def __init__(self, stdin: In, out: Out) -> None:
        self.stdin = stdin
        self.out = out
        self.pending = b""

    def readline(self, prompt: str) -> Optional[str]:
        self.out.write(prompt)
        line = bytearray()
        while True:
            if not self.pending:
                chunk = getattr(self.stdin, "read1", None)
                self.pending = chunk(4096) if chunk is not None else self.stdin.read(1)
                if not self.pending:
                    return None if not line else line.decode("utf-8", "replace")
            c, self.pending = self.pending[0], self.pending[1:]
            if c in (0x0D, 0x0A):
                self.out.write("\n")
                if c == 0x0D and self.pending[:1] == b"\n":
                    self.pending = self.pending[1:]
                return line.decode("utf-8", "replace")
            if c in (0x7F, 0x08):
                if line:
                    line.pop()
                    self.out.write("\b \b")
            elif c == 0x03:
                self.out.write("^C\n" + prompt)
                line.clear()
            elif c == 0x04:
                if not line:
                    return None
            elif c == 0x1B:
                self.pending = self.pending.lstrip(b"[O0123456789;")[1:]  # drop an escape sequence
            elif c >= 0x20:
                line.append(c)
                self.out.write(bytes([c]))


def interactive(sh: Shell, io: IO) -> int:
    """Read commands from stdin and run them until ``exit`` or end of input. On a tty there is a
    prompt and echo; otherwise stdin is read as a script, line by line."""
    editor = _LineEditor(io.stdin, io.stdout) if sh.tty else None
    buf = ""
    while True:
        if editor is not None:
            line = editor.readline(_prompt(sh) if not buf else "> ")
        else:
            raw = io.stdin.readline()
            line = raw.decode("utf-8", "replace").rstrip("\n") if raw else None
        if line is None:
            if editor is not None:
                io.stdout.write("\n")
            return sh.status
        buf += line + "\n"
        try:
            parse(buf)
        except Incomplete:
            continue
        except ShSyntaxError:
            pass
        src, buf = buf, ""
        sh.run_script(src, io)


# -- entry points ---------------------------------------------------------------------------------
SHELLS = ("sh", "ash", "bash")


def sh_main(sh: Shell, argv: list[str], io: IO) -> int:
    """``sh [-c script [name [args…]]] [-e] [-x] [file]``."""
    args = argv[1:]
    script: Optional[str] = None
    while args and args[0].startswith("-") and args[0] != "-":
        opt = args.pop(0)
        if opt == "--":
            break
        for ch in opt[1:]:
            if ch == "c":
                if not args:
                    sh.err(io, f"{sh.name}: -c requires an argument")
                    return 2
                script = args.pop(0)
            elif ch == "e":
                sh.errexit = True
            elif ch == "x":
                sh.xtrace = True
            elif ch in "ils":
                pass
            else:
                sh.err(io, f"{sh.name}: -{ch}: invalid option")
                return 2
    sh.stderr_sink = io.stderr
    try:
        if script is not None:
            if args:
                sh.name, sh.params = args[0], args[1:]
            return sh.run_script(script, io)
        if args and args[0] != "-":
            path = sh.path(args[0])
            try:
                src = sh.files.read(path).decode("utf-8", "replace")
            except FSError:
                sh.err(io, f"{sh.name}: can't open '{args[0]}': No such file or directory")
                return 2
            sh.params = args[1:]
            return sh.run_script(src, io)
        return interactive(sh, io)
    except ShellExit as e:
        return e.code
    except _Break:
        return 0
    except FSError as e:
        sh.err(io, f"{sh.name}: {e}")
        return 2


APPLETS.update({n: sh_main for n in SHELLS if n != "bash"})
