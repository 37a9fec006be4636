"""A POSIX-sh subset parser: words with quoting and expansions, pipelines, ``&&``/``||``, ``;``,
redirections, ``if``/``for``/``while``/``until``, ``{ …; }`` and ``( … )``.

Words stay unexpanded here (a tuple of :class:`Seg`): expansion needs the shell's variables
and file system, and which parts were quoted decides field splitting and globbing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Union


class ShSyntaxError(Exception):
    """Busybox ash's wording: ``syntax error: unexpected "fi"``."""


class Incomplete(ShSyntaxError):
    """The input ends inside a construct (an open quote, ``if`` without ``fi``, a trailing
    ``|``): an interactive shell reads another line (PS2) before running it."""


@dataclass(frozen=True)
class Seg:
    """One piece of a word. ``kind``: ``lit`` (unquoted text: globbed), ``q`` (quoted text),
    ``var`` (``$NAME`` / ``${NAME…}``: ``text`` the name, ``op``/``arg`` a ``${NAME:-arg}``
    style operator), ``cmd`` (``$(…)`` or backticks: ``text`` the source), ``arith``
    (``$((…))``). ``quoted``: inside double quotes (no field splitting, no globbing)."""

    kind: str
    text: str
    quoted: bool = False
    op: str = ""
    arg: str = ""


Word = tuple[Seg, ...]


@dataclass(frozen=True)
class Redir:
    fd: int
    op: str  # '>', '>>', '<', '>&', '<&'
    target: Word


@dataclass(frozen=True)
class Simple:
    assigns: tuple[tuple[str, Word], ...]
    words: tuple[Word, ...]
    redirs: tuple[Redir, ...] = ()


@dataclass(frozen=True)
class Pipeline:
    cmds: tuple[Command, ...]
    negate: bool = False


@dataclass(frozen=True)
class AndOr:
    first: Pipeline
    rest: tuple[tuple[str, Pipeline], ...] = ()


@dataclass(frozen=True)
class Seq:
    items: tuple[AndOr, ...]


@dataclass(frozen=True)
class If:
    branches: tuple[tuple[Seq, Seq], ...]
    otherwise: Optional[Seq]
    redirs: tuple[Redir, ...] = ()


@dataclass(frozen=True)
class For:
    var: str
    words: Optional[tuple[Word, ...]]  # None: "$@"
    body: Seq
    redirs: tuple[Redir, ...] = ()


@dataclass(frozen=True)
class While:
    cond: Seq
    body: Seq
    until: bool = False
    redirs: tuple[Redir, ...] = ()


@dataclass(frozen=True)
class Group:
    body: Seq
    subshell: bool = False
    redirs: tuple[Redir, ...] = ()


Command = Union[Simple, If, For, While, Group]

_META = set(" \t\n;&|<>()")
_KEYWORDS = {"if", "then", "elif", "else", "fi", "for", "in", "do", "done", "while", "until", "{", "}", "!"}


@dataclass(frozen=True)
class _Tok:
    kind: str  # 'word', 'op', 'nl', 'eof'
    text: str = ""  # the operator, or the raw text of a word (for keywords and messages)
    word: Word = ()
    fd: Optional[int] = None  # for a redirection operator: the explicit fd before it


def _is_name(s: str) -> bool:
    return bool(s) and (s[0].isalpha() or s[0] == "_") and all(c.isalnum() or c == "_" for c in s)


class _Lexer:
    def __init__(self, src: str) -> None:
        self.s = src
        self.i = 0

    def tokens(self) -> list[_Tok]:
        out: list[_Tok] = []
        while True:
            t = self._next()
            out.append(t)
            if t.kind == "eof":
                return out

    def _next(self) -> _Tok:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and s[self.i + 1:self.i + 2] == "\n":
                self.i += 2  # line continuation
            elif c == "#":
                while self.i < len(s) and s[self.i] != "\n":
                    self.i += 1
            else:
                break
        if self.i >= len(s):
            return _Tok("eof")
        c = s[self.i]
        if c == "\n":
            self.i += 1
            return _Tok("nl", "\n")
        for op in ("&&", "||", ">>", ">&", "<&", "&>", ";", "&", "|", "<", ">", "(", ")"):
            if s.startswith(op, self.i):
                self.i += len(op)
                return _Tok("op", op)
        start = self.i
        word = self._word()
        raw = s[start:self.i]
        if raw.isdigit() and self.i < len(s) and s[self.i] in "<>":
            # "2>" "2>&1": a number right before a redirection is its fd
            t = self._next()
            return _Tok("op", t.text, fd=int(raw))
        return _Tok("word", raw, word)

    def _word(self) -> Word:
        segs: list[Seg] = []

        def lit(text: str, kind: str = "lit", quoted: bool = False) -> None:
            if segs and segs[-1].kind == kind and segs[-1].quoted == quoted and kind in ("lit", "q"):
                segs[-1] = Seg(kind, segs[-1].text + text, quoted)
            else:
                segs.append(Seg(kind, text, quoted))

        s = self.s
        while self.i < len(s) and s[self.i] not in _META:
            c = s[self.i]
            if c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise Incomplete("unterminated quoted string")
                lit(s[self.i + 1:end], "q")
                self.i = end + 1
            elif c == '"':
                self.i += 1
                self._dquoted(segs)
            elif c == "\\":
                if self.i + 1 >= len(s):
                    self.i += 1
                    break
                lit(s[self.i + 1], "q")
                self.i += 2
            elif c == "$":
                segs.append(self._dollar(False))
            elif c == "`":
                segs.append(self._backtick(False))
            else:
                lit(c)
                self.i += 1
        return tuple(segs)

    def _dquoted(self, segs: list[Seg]) -> None:
        s = self.s
        buf: list[str] = []

        def flush() -> None:
            if buf:
                segs.append(Seg("q", "".join(buf), True))
                buf.clear()

        while True:
            if self.i >= len(s):
                raise Incomplete("unterminated quoted string")
            c = s[self.i]
            if c == '"':
                self.i += 1
                flush()
                if not segs:
                    segs.append(Seg("q", "", True))
                return
            if c == "\\" and s[self.i + 1:self.i + 2] in ('"', "\\", "$", "`", "\n"):
                if s[self.i + 1] != "\n":
                    buf.append(s[self.i + 1])
                self.i += 2
            elif c == "$":
                flush()
                seg = self._dollar(True)
                segs.append(seg)
            elif c == "`":
                flush()
                segs.append(self._backtick(True))
            else:
                buf.append(c)
                self.i += 1
        # unreachable

    def _dollar(self, quoted: bool) -> Seg:
        s = self.s
        i = self.i + 1
        if s.startswith("((", i):
            end = self._matching(i + 2, 2)
            self.i = end + 2
            return Seg("arith", s[i + 2:end], quoted)
        if s.startswith("(", i):
            end = self._matching(i + 1, 1)
            self.i = end + 1
            return Seg("cmd", s[i + 1:end], quoted)
        if s.startswith("{", i):
            end = s.find("}", i)
            if end < 0:
                raise Incomplete("missing }")
            body = s[i + 1:end]
            self.i = end + 1
            if body.startswith("#") and _is_name(body[1:]):
                return Seg("var", body[1:], quoted, op="#")
            if body[:1] and body[0] in "?$#@*!0123456789":
                name = body[0]
            else:
                j = 0
                while j < len(body) and (body[j].isalnum() or body[j] == "_"):
                    j += 1
                name = body[:j]
            rest = body[len(name):]
            for op in (":-", ":=", ":+", "-", "=", "+"):
                if rest.startswith(op):
                    return Seg("var", name, quoted, op=op, arg=rest[len(op):])
            if rest or not name:
                raise ShSyntaxError(f"bad substitution: ${{{body}}}")
            return Seg("var", name, quoted)
        if i < len(s) and s[i] in "?$#@*!0123456789":
            self.i = i + 1
            return Seg("var", s[i], quoted)
        j = i
        while j < len(s) and (s[j].isalnum() or s[j] == "_"):
            j += 1
        if j == i:  # a lone "$" is literal
            self.i = i
            return Seg("q" if quoted else "lit", "$", quoted)
        self.i = j
        return Seg("var", s[i:j], quoted)

    def _matching(self, i: int, closers: int) -> int:
        """Index of the ``)`` (or ``))``) that closes the ``$(`` opened before ``i``."""
        s = self.s
        depth = 0
        while i < len(s):
            c = s[i]
            if c == "'":
                end = s.find("'", i + 1)
                if end < 0:
                    raise Incomplete("unterminated quoted string")
                i = end + 1
                continue
            if c == "\\":
                i += 2
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    if closers == 2:
                        if s.startswith("))", i):
                            return i
                    else:
                        return i
                else:
                    depth -= 1
            i += 1
        raise Incomplete("missing )")

    def _backtick(self, quoted: bool) -> Seg:
        s = self.s
        j = self.i + 1
        buf: list[str] = []
        while j < len(s) and s[j] != "`":
            if s[j] == "\\" and s[j + 1:j + 2] in ("`", "\\", "$"):
                buf.append(s[j + 1])
                j += 2
            else:
                buf.append(s[j])
                j += 1
        if j >= len(s):
            raise Incomplete("unterminated `")
        self.i = j + 1
        return Seg("cmd", "".join(buf), quoted)


class _Parser:
    def __init__(self, src: str) -> None:
        self.toks = _Lexer(src).tokens()
        self.p = 0

    def peek(self) -> _Tok:
        return self.toks[self.p]

    def take(self) -> _Tok:
        t = self.toks[self.p]
        if t.kind != "eof":
            self.p += 1
        return t

    def kw(self, t: _Tok) -> str:
        """The reserved word ``t`` is, if it is one (an unquoted literal word)."""
        if t.kind == "word" and len(t.word) == 1 and t.word[0].kind == "lit" and t.text in _KEYWORDS:
            return t.text
        return ""

    def unexpected(self, t: _Tok) -> ShSyntaxError:
        if t.kind == "eof":
            return Incomplete("unexpected end of file")
        return ShSyntaxError(f'unexpected "{t.text}"' if t.kind != "nl" else "unexpected newline")

    def skip_nl(self) -> None:
        while self.peek().kind == "nl":
            self.take()

    def program(self) -> Seq:
        seq = self.seq(frozenset(), top=True)
        t = self.peek()
        if t.kind != "eof":
            raise self.unexpected(t)
        return seq

    def seq(self, stop: frozenset[str], top: bool = False) -> Seq:
        items: list[AndOr] = []
        while True:
            while self.peek().kind == "nl" or (self.peek().kind == "op" and self.peek().text == ";" and not items):
                self.take()
            t = self.peek()
            if t.kind == "eof":
                if stop:
                    raise Incomplete("unexpected end of file")
                break
            if self.kw(t) in stop or (t.kind == "op" and t.text == ")" and ")" in stop):
                break
            items.append(self.and_or())
            t = self.peek()
            if t.kind == "op" and t.text in (";", "&"):
                self.take()  # "&": no background jobs here; the command runs to its end
            elif t.kind == "nl":
                self.take()
            elif t.kind == "eof" or self.kw(t) in stop or (t.kind == "op" and t.text == ")" and ")" in stop):
                continue
            else:
                raise self.unexpected(t)
        if not items and stop:
            raise self.unexpected(self.peek())
        return Seq(tuple(items))

    def and_or(self) -> AndOr:
        first = self.pipeline()
        rest: list[tuple[str, Pipeline]] = []
        while self.peek().kind == "op" and self.peek().text in ("&&", "||"):
            op = self.take().text
            self.skip_nl()
            rest.append((op, self.pipeline()))
        return AndOr(first, tuple(rest))

    def pipeline(self) -> Pipeline:
        negate = False
        if self.kw(self.peek()) == "!":
            self.take()
            negate = True
        cmds = [self.command()]
        while self.peek().kind == "op" and self.peek().text == "|":
            self.take()
            self.skip_nl()
            cmds.append(self.command())
        return Pipeline(tuple(cmds), negate)

    def command(self) -> Command:
        t = self.peek()
        k = self.kw(t)
        node: Command
        if k == "if":
            node = self.if_()
        elif k == "for":
            node = self.for_()
        elif k in ("while", "until"):
            self.take()
            cond = self.seq(frozenset({"do"}))
            self.expect("do")
            body = self.seq(frozenset({"done"}))
            self.expect("done")
            node = While(cond, body, until=k == "until")
        elif k == "{":
            self.take()
            body = self.seq(frozenset({"}"}))
            self.expect("}")
            node = Group(body)
        elif t.kind == "op" and t.text == "(":
            self.take()
            body = self.seq(frozenset({")"}))
            if not (self.peek().kind == "op" and self.peek().text == ")"):
                raise self.unexpected(self.peek())
            self.take()
            node = Group(body, subshell=True)
        elif k in ("then", "elif", "else", "fi", "do", "done", "in", "}"):
            raise self.unexpected(t)
        else:
            return self.simple()
        redirs = self.redirs()
        if redirs:
            node = dataclasses.replace(node, redirs=redirs)
        return node

    def expect(self, word: str) -> None:
        t = self.take()
        if self.kw(t) != word:
            raise self.unexpected(t)

    def if_(self) -> If:
        self.take()
        branches: list[tuple[Seq, Seq]] = []
        otherwise: Optional[Seq] = None
        while True:
            cond = self.seq(frozenset({"then"}))
            self.expect("then")
            body = self.seq(frozenset({"elif", "else", "fi"}))
            branches.append((cond, body))
            k = self.kw(self.take())
            if k == "elif":
                continue
            if k == "else":
                otherwise = self.seq(frozenset({"fi"}))
                self.expect("fi")
            break
        return If(tuple(branches), otherwise)

    def for_(self) -> For:
        self.take()
        t = self.take()
        if t.kind != "word" or not _is_name(t.text):
            raise self.unexpected(t)
        words: Optional[tuple[Word, ...]] = None
        self.skip_nl()
        if self.kw(self.peek()) == "in":
            self.take()
            ws: list[Word] = []
            while self.peek().kind == "word":
                ws.append(self.take().word)
            words = tuple(ws)
        if self.peek().kind == "op" and self.peek().text == ";":
            self.take()
        self.skip_nl()
        self.expect("do")
        body = self.seq(frozenset({"done"}))
        self.expect("done")
        return For(t.text, words, body)

    def redirs(self) -> tuple[Redir, ...]:
        out: list[Redir] = []
        while self.peek().kind == "op" and self.peek().text in (">", ">>", "<", ">&", "<&", "&>"):
            out.extend(self.redir())
        return tuple(out)

    def redir(self) -> list[Redir]:
        t = self.take()
        target = self.take()
        if target.kind != "word":
            raise self.unexpected(target)
        if t.text == "&>":  # bash/ash extension: both stdout and stderr
            return [Redir(1, ">", target.word), Redir(2, ">&", (Seg("lit", "1"),))]
        fd = t.fd if t.fd is not None else (0 if t.text[0] == "<" else 1)
        return [Redir(fd, t.text, target.word)]

    def simple(self) -> Simple:
        assigns: list[tuple[str, Word]] = []
        words: list[Word] = []
        redirs: list[Redir] = []
        while True:
            t = self.peek()
            if t.kind == "op" and t.text in (">", ">>", "<", ">&", "<&", "&>"):
                redirs.extend(self.redir())
            elif t.kind == "word":
                if not words and "=" in t.text and t.word and t.word[0].kind == "lit" \
                        and _is_name(t.word[0].text.split("=", 1)[0]) and "=" in t.word[0].text:
                    self.take()
                    first = t.word[0]
                    name, _, value = first.text.partition("=")
                    rest = ((Seg("lit", value),) if value else ()) + t.word[1:]
                    assigns.append((name, rest))
                else:
                    words.append(self.take().word)
            else:
                break
        if not (assigns or words or redirs):
            raise self.unexpected(self.peek())
        return Simple(tuple(assigns), tuple(words), tuple(redirs))


def parse(src: str) -> Seq:
    """Parse a whole script (``sh -c`` text or one interactive line plus continuations)."""
    return _Parser(src).program()


def parse_word(src: str) -> Word:
    """A word as it would be inside double quotes (for ``${X:-default}``)."""
    lexer = _Lexer(src + '"')
    segs: list[Seg] = []
    lexer._dquoted(segs)
    return tuple(segs)
