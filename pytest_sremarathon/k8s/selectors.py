"""Label and field selectors, as the Kubernetes API server parses and evaluates them.

``parse_label_selector("app=web,tier in (a,b),!canary")`` and
``parse_field_selector("spec.nodeName=n1,status.phase!=Failed")`` turn query strings into
predicates over object dicts; :func:`match_selector_object` evaluates a structured
``LabelSelector`` (``matchLabels`` / ``matchExpressions``) as found in Deployment specs.
Malformed selectors raise :class:`ApiError` 400 BadRequest with the server's wording.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .store import ApiError

Predicate = Callable[[dict[str, Any]], bool]

_KEY_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # = != in notin exists !exists gt lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("gt", "lt"):
            try:
                have, want = int(value or ""), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.op == "gt" else have < want
        return False


def _bad_label(selector: str, why: str) -> ApiError:
    return ApiError(400, "BadRequest", f"unable to parse requirement: {why}")


def _split_top_level(s: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth = [], 0
    cur: list[str] = []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<vals>[^)]*)\)$")


def parse_label_selector(selector: Optional[str]) -> list[Requirement]:
    if not selector:
        return []
    reqs: list[Requirement] = []
    for part in _split_top_level(selector):
        m = _SET_RE.match(part)
        if m:
            vals = tuple(v.strip() for v in m.group("vals").split(",") if v.strip())
            reqs.append(Requirement(_check_key(selector, m.group("key")), m.group("op"), vals))
            continue
        for op, name in (("!=", "!="), ("==", "="), ("=", "="), (">", "gt"), ("<", "lt")):
            if op in part:
                key, _, value = part.partition(op)
                key, value = key.strip(), value.strip()
                if name in ("gt", "lt"):
                    try:
                        int(value)
                    except ValueError:
                        raise _bad_label(selector, f"for 'Gt', 'Lt' operators, the value must be an integer") from None
                reqs.append(Requirement(_check_key(selector, key), name, (value,)))
                break
        else:
            if part.startswith("!"):
                reqs.append(Requirement(_check_key(selector, part[1:].strip()), "!exists"))
            else:
                reqs.append(Requirement(_check_key(selector, part), "exists"))
    return reqs


def _check_key(selector: str, key: str) -> str:
    if not _KEY_RE.match(key) or len(key.split("/")[-1]) > 63:
        raise _bad_label(selector, f'name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', '
                                   f'and must start and end with an alphanumeric character (got {key!r})')
    return key


def label_predicate(selector: Optional[str]) -> Optional[Predicate]:
    reqs = parse_label_selector(selector)
    if not reqs:
        return None

    def pred(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(r.matches(labels) for r in reqs)

    return pred


# -- field selectors ---------------------------------------------------------------------------

#: field selectors each kind supports besides metadata.name and metadata.namespace
FIELD_LABELS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
            "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"),
    "Node": ("spec.unschedulable",),
    "Namespace": ("status.phase",),
    "Secret": ("type",),
    "Event": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
              "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
              "reason", "reportingComponent", "source", "type"),
    "ReplicaSet": ("status.replicas",),
}


def field_value(obj: dict[str, Any], path: str) -> str:
    if path == "source" and obj.get("kind") == "Event":
        return (obj.get("source") or {}).get("component", "") or obj.get("reportingComponent", "")
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(selector: Optional[str], kind: str) -> list[tuple[str, str, str]]:
    if not selector:
        return []
    out = []
    allowed = ("metadata.name", "metadata.namespace") + FIELD_LABELS.get(kind, ())
    for part in _split_top_level(selector):
        for op in ("!=", "==", "="):
            if op in part:
                field, _, value = part.partition(op)
                field = field.strip()
                if field not in allowed:
                    raise ApiError(400, "BadRequest", f'field label not supported: {field}')
                out.append((field, "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            raise ApiError(400, "BadRequest", f"invalid selector: '{selector}'; can't understand '{part}'")
    return out


def field_predicate(selector: Optional[str], kind: str) -> Optional[Predicate]:
    reqs = parse_field_selector(selector, kind)
    if not reqs:
        return None

    def pred(obj: dict[str, Any]) -> bool:
        for field, op, value in reqs:
            have = field_value(obj, field)
            if (have == value) != (op == "="):
                return False
        return True

    return pred


# -- structured selectors (Deployment.spec.selector) ---------------------------------------

def match_selector_object(selector: Optional[dict[str, Any]], labels: Optional[dict[str, str]]) -> bool:
    """Evaluate a ``metav1.LabelSelector``; an empty selector matches everything, ``None`` nothing."""
    if selector is None:
        return False
    labels = labels or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        req = Requirement(expr["key"], ops.get(expr.get("operator", ""), "in"), tuple(expr.get("values") or ()))
        if not req.matches(labels):
            return False
    return True


def selector_string(selector: Optional[dict[str, Any]]) -> str:
    """``metav1.FormatLabelSelector``: the text kubectl shows in the Selector column."""
    if selector is None:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, vals = expr.get("operator"), expr.get("key"), ",".join(sorted(expr.get("values") or []))
        if op == "In":
            parts.append(f"{key} in ({vals})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({vals})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    s = ",".join(parts)
    return s or "<none>"
