"""``sremarathon kinds``: the fault catalogue — every kind a schedule can draw (the built-in
ones and those plugins add), with its family, how the root cause is named, how it arrives,
the repair it documents and what its mitigation judge checks."""

from __future__ import annotations

import argparse
import inspect
import json
import textwrap
from dataclasses import asdict, dataclass

from .faults import FaultKind, builtin_registry
from .hookspecs import standalone_plugin_manager


@dataclass(frozen=True)
class KindRow:
    kind: str
    family: str
    component: str
    arrives: str
    repair: str
    judge: str
    description: str
    source: str  # the class that implements it, module:qualname (plugins' kinds show theirs)


def catalogue_rows() -> list[KindRow]:
    registry = builtin_registry(standalone_plugin_manager().hook.pytest_sremarathon_fault_kinds())
    return [_row(kind) for _, kind in sorted(registry.items(), key=lambda kv: (kv[1].family, kv[0]))]


def _row(kind: FaultKind) -> KindRow:
    cls = type(kind)
    # A plugin kind that fills no column still says something: its docstring's first line.
    doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
    return KindRow(kind=kind.name, family=kind.family, component=kind.component_form, arrives=kind.arrives,
                   repair=kind.repair, judge=kind.judge, description=kind.description or doc,
                   source=f"{cls.__module__}:{cls.__qualname__}")


def cmd_kinds(args: argparse.Namespace) -> int:
    rows = catalogue_rows()
    if args.family:
        rows = [r for r in rows if r.family == args.family]
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    families: dict[str, int] = {}
    for r in rows:
        families[r.family] = families.get(r.family, 0) + 1
    wrap = textwrap.TextWrapper(width=100, initial_indent="    ", subsequent_indent="      ")
    for r in rows:
        print(f"{r.kind}  [{r.family}]  {r.component or '(component not declared)'}")
        print(wrap.fill(r.description))
        for label, text in (("arrives", r.arrives), ("repair", r.repair), ("judged", r.judge)):
            if text:
                print(wrap.fill(f"{label}: {text}"))
        print()
    print(f"{len(rows)} kinds: " + ", ".join(f"{n} {f}" for f, n in sorted(families.items())))
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kinds", help="list the fault catalogue (kind, family, component, repair, judge)",
                       description="Every fault kind a schedule can draw, built-in and from plugins: its family, "
                                   "how its root cause is named, how it arrives, the documented repair and what "
                                   "the mitigation judge checks.")
    p.add_argument("--json", action="store_true", help="print the catalogue as a JSON list")
    p.add_argument("--family", help="only the kinds of one family (change, dependency, infrastructure, load)")
    p.set_defaults(func=cmd_kinds)
