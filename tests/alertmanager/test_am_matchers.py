"""Alertmanager's matcher syntax and the API's filter semantics."""

from __future__ import annotations

import pytest

from pytest_sremarathon.alertmanager import MatcherError, parse_matchers
from pytest_sremarathon.alertmanager.matchers import filter_matches, labels_match, parse_filter, parse_matcher


@pytest.mark.parametrize("text, name, op, value", [
    ('alertname="HighErrorRate"', "alertname", "=", "HighErrorRate"),
    ("alertname=HighErrorRate", "alertname", "=", "HighErrorRate"),
    (' severity =~ "crit.*" ', "severity", "=~", "crit.*"),
    ('service!="cart"', "service", "!=", "cart"),
    ('pod!~"cart-.*"', "pod", "!~", "cart-.*"),
    (r'msg="say \"hi\"\n"', "msg", "=", 'say "hi"\n'),
    (r'path="C:\dir"', "path", "=", r"C:\dir"),  # a spurious escape stays literal
    ('empty=""', "empty", "=", ""),
])
def test_parse_one(text: str, name: str, op: str, value: str) -> None:
    m = parse_matcher(text)
    assert (m.name, m.op, m.value) == (name, op, value)


@pytest.mark.parametrize("text, message", [
    ("alertname", "bad matcher format: alertname"),
    ("1abc=x", "bad matcher format: 1abc=x"),
    ('a="b"c"', 'matcher value contains unescaped double quote: "b"c"'),
    ('a="b', 'matcher value contains unescaped double quote: "b'),
])
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(MatcherError) as err:
        parse_matcher(text)
    assert str(err.value) == message


def test_a_bad_regex_is_refused() -> None:
    with pytest.raises(MatcherError, match="^error parsing regexp: "):
        parse_matcher('a=~"("')


def test_brace_lists_and_repeated_filters() -> None:
    listed = parse_matchers('{alertname="X",severity=~"crit.*", msg="a,b"}')
    assert [(m.name, m.op, m.value) for m in listed] == [
        ("alertname", "=", "X"), ("severity", "=~", "crit.*"), ("msg", "=", "a,b")]
    repeated = parse_filter(['alertname="X"', 'severity=~"crit.*"'])
    assert [(m.name, m.op, m.value) for m in repeated] == [("alertname", "=", "X"), ("severity", "=~", "crit.*")]
    assert str(listed[1]) == 'severity=~"crit.*"'


def test_regexes_are_anchored() -> None:
    labels = {"severity": "critical", "service": "cart"}
    assert labels_match(tuple(parse_matchers('{severity=~"crit.*"}')), labels)
    assert not labels_match(tuple(parse_matchers('{severity=~"crit"}')), labels)
    assert labels_match(tuple(parse_matchers('{severity!~"warn.*"}')), labels)
    assert not labels_match(tuple(parse_matchers('{service="cart",severity="warning"}')), labels)


def test_filter_semantics_of_empty_values() -> None:
    with_pod = {"alertname": "X", "pod": "p1"}
    without = {"alertname": "X"}
    assert filter_matches(parse_filter(['pod=""']), without)  # = "" also lets an absent label through
    assert not filter_matches(parse_filter(['pod=""']), with_pod)
    assert filter_matches(parse_filter(['pod!=""']), with_pod)  # != "": the label is there
    assert not filter_matches(parse_filter(['pod!=""']), without)
    assert filter_matches(parse_filter(['pod="p1"', 'alertname=~"X|Y"']), with_pod)
    assert not filter_matches(parse_filter(['pod="p2"']), with_pod)
