"""Alertmanager's label matchers: ``name="value"``, ``name!=value``, ``name=~"re"``, ``name!~"re"``.

Parsing follows Alertmanager's classic matcher parser (``pkg/labels/parse.go``), the one its API
falls back to: optional quotes around the value, ``\\"``, ``\\\\`` and ``\\n`` escapes, and its
error strings (``bad matcher format: …``, ``matcher value contains unescaped double quote: …``).
A brace list ``{a="b",c=~"d.*"}`` is accepted wherever one matcher is, as amtool and the UI
write them. Regexes are anchored at both ends, as Prometheus anchors them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

EQUAL, NOT_EQUAL, REGEX, NOT_REGEX = "=", "!=", "=~", "!~"

_MATCHER = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(=~|=|!=|!~)\s*(.*?)\s*\Z", re.S)
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


class MatcherError(ValueError):
    """A matcher Alertmanager would refuse; the message is Alertmanager's."""


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # EQUAL | NOT_EQUAL | REGEX | NOT_REGEX
    value: str
    _regex: Optional[re.Pattern[str]] = field(default=None, compare=False, repr=False)

    @staticmethod
    def make(name: str, op: str, value: str) -> Matcher:
        regex = None
        if op in (REGEX, NOT_REGEX):
            try:
                regex = re.compile(value)
            except re.error as exc:
                raise MatcherError(f"error parsing regexp: {exc}: `{value}`") from None
        return Matcher(name, op, value, regex)

    @property
    def is_regex(self) -> bool:
        return self.op in (REGEX, NOT_REGEX)

    @property
    def is_equal(self) -> bool:
        return self.op in (EQUAL, REGEX)

    def matches(self, value: str) -> bool:
        if self.op == EQUAL:
            return value == self.value
        if self.op == NOT_EQUAL:
            return value != self.value
        assert self._regex is not None
        found = self._regex.fullmatch(value) is not None
        return found if self.op == REGEX else not found

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{self.name}{self.op}"{escaped}"'


def parse_matcher(text: str) -> Matcher:
    m = _MATCHER.match(text)
    if m is None:
        raise MatcherError(f"bad matcher format: {text}")
    name, op, raw = m.group(1), m.group(2), m.group(3)
    expect_quote = raw.startswith('"')
    if expect_quote:
        raw = raw[1:]
    out: list[str] = []
    escaped = False
    for i, ch in enumerate(raw):
        if escaped:
            escaped = False
            if ch == "n":
                out.append("\n")
            elif ch in ('"', "\\"):
                out.append(ch)
            else:  # a spurious escape: the backslash is literal
                out.append("\\" + ch)
            continue
        if ch == "\\":
            if i < len(raw) - 1:
                escaped = True
                continue
            out.append("\\")
        elif ch == '"':
            if not expect_quote or i < len(raw) - 1:
                raise MatcherError(f"matcher value contains unescaped double quote: {m.group(3)}")
            expect_quote = False
        else:
            out.append(ch)
    if expect_quote:
        raise MatcherError(f"matcher value contains unescaped double quote: {m.group(3)}")
    return Matcher.make(name, op, "".join(out))


def parse_matchers(text: str) -> list[Matcher]:
    """One matcher, or a ``{…}`` list of them separated by commas outside quotes."""
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return [parse_matcher(text)]
    body = stripped[1:-1]
    tokens: list[str] = []
    token: list[str] = []
    inside, escaped = False, False
    for ch in body:
        if ch == "," and not inside:
            tokens.append("".join(token))
            token = []
            continue
        if ch == '"':
            if not escaped:
                inside = not inside
            else:
                escaped = False
        elif ch == "\\":
            escaped = not escaped
        else:
            escaped = False
        token.append(ch)
    if "".join(token).strip():
        tokens.append("".join(token))
    return [parse_matcher(t) for t in tokens]


def parse_filter(filters: list[str]) -> list[Matcher]:
    """The ``filter`` query parameters of ``/api/v2/alerts`` and ``/api/v2/silences``."""
    out: list[Matcher] = []
    for f in filters:
        out.extend(parse_matchers(f))
    return out


def filter_matches(matchers: list[Matcher], labels: Mapping[str, str]) -> bool:
    """Alertmanager's API filter (``matchFilterLabels``): a matcher with an empty value also
    lets through an alert without the label (``=``, ``=~``) or with any value of it (``!=``,
    ``!~``), as a label set cannot hold an empty value."""
    for m in matchers:
        present = m.name in labels
        value = labels.get(m.name, "")
        if m.op in (NOT_EQUAL, NOT_REGEX):
            if m.value == "" and present:
                continue
        elif m.value == "" and not present:
            continue
        if not m.matches(value):
            return False
    return True


def labels_match(matchers: tuple[Matcher, ...], labels: Mapping[str, str]) -> bool:
    """A silence's (or a route's) matchers against an alert: all match, an absent label being
    the empty string."""
    return all(m.matches(labels.get(m.name, "")) for m in matchers)


def valid_label_name(name: str) -> bool:
    return _LABEL_NAME.match(name) is not None
