"""The live objects of one kind grouped by (namespace, the value of one label), kept from the
store's change feed, for the control loops that select on that label alone (the apps' Services,
autoscalers and disruption budgets all select their pods by ``app``).

A group's members come in :meth:`.Store.list` order (by name within the namespace), as a scan
of the namespace would give them; :meth:`LabelIndex.version` is the resourceVersion of the last
change to any member (written, added, gone, or its label moved it to another group), so a loop
whose reads of a group are keyed on it can skip a group that stood still.
"""

from __future__ import annotations

from typing import Any, Optional

from ..k8s.store import Store

_Group = tuple[str, str]  # (namespace, label value)


class LabelIndex:
    def __init__(self, store: Store, kind: str, label: str) -> None:
        self.store = store
        self.kind = kind
        self.label = label
        self._members: dict[_Group, dict[str, dict[str, Any]]] = {}  # group -> name -> live object
        self._filed: dict[tuple[str, str], _Group] = {}  # (namespace, name) -> the group it is in
        self._version: dict[_Group, int] = {}
        self._sorted: dict[_Group, list[dict[str, Any]]] = {}  # group -> members by name; dropped on a change
        for obj in store.list(kind):
            self._file(obj, False)
        store.listeners.append(self._note)

    def members(self, namespace: str, value: str) -> list[dict[str, Any]]:
        """The group's live objects in list order; the list is shared: read it, do not change it."""
        group = (namespace, value)
        ordered = self._sorted.get(group)
        if ordered is None:
            members = self._members.get(group)
            ordered = self._sorted[group] = [members[n] for n in sorted(members)] if members else []
        return ordered

    def version(self, namespace: str, value: str) -> int:
        """The resourceVersion of the last change to the group's members (0: none yet)."""
        return self._version.get((namespace, value), 0)

    def _note(self, type_: str, obj: dict[str, Any]) -> None:
        """The store's listener (under its lock, after the change is recorded)."""
        if obj.get("kind") != self.kind:
            return
        md = obj["metadata"]
        # As the store's own indexes: a touch of an object no longer stored changes no group.
        if type_ != "DELETED" and self.store.get(self.kind, md.get("namespace"), md["name"]) is not obj:
            return
        self._file(obj, type_ == "DELETED")

    def _file(self, obj: dict[str, Any], gone: bool) -> None:
        md = obj["metadata"]
        ns, name = md.get("namespace") or "", md["name"]
        value: Optional[str] = None if gone else (md.get("labels") or {}).get(self.label)
        now = (ns, value) if isinstance(value, str) else None
        before = self._filed.pop((ns, name), None)
        rv = self.store.resource_version
        if before is not None:
            del self._members[before][name]
            self._version[before] = rv
            self._sorted.pop(before, None)
        if now is not None:
            self._members.setdefault(now, {})[name] = obj
            self._filed[(ns, name)] = now
            self._version[now] = rv
            self._sorted.pop(now, None)
