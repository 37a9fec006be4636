"""``sremarathon kinds``: the fault catalogue as a user reads it, from the real command."""

from __future__ import annotations

import json
import re
from pathlib import Path

from support.cli import run_cli

from pytest_sremarathon.faults import BUILTIN_KINDS

COLUMNS = ("kind", "family", "component", "arrives", "repair", "judge", "description", "source")
IDENTIFIER = re.compile(r"^(service|node|zone|external):")


def _catalogue(*args: str, **kw) -> list[dict]:
    proc = run_cli("kinds", "--json", *args, **kw)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_kind_a_schedule_draws_is_listed_with_every_column_filled(tmp_path: Path) -> None:
    rows = {r["kind"]: r for r in _catalogue()}
    assert {k.name for k in BUILTIN_KINDS} <= rows.keys()
    scheduled: set[str] = set()
    for seed in (1, 2, 3):
        proc = run_cli("schedule", "--json", "--seed", str(seed), "--svg", str(tmp_path / f"s{seed}.svg"))
        assert proc.returncode == 0, proc.stderr
        scheduled |= {f["kind"] for f in json.loads(proc.stdout)["faults"]}
    assert scheduled and scheduled <= rows.keys()
    for name, row in rows.items():
        assert set(row) == set(COLUMNS)
        assert all(row[c] for c in COLUMNS), f"{name}: empty column in {row}"
        assert IDENTIFIER.match(row["component"]), row["component"]
    change = [r for r in rows.values() if r["family"] == "change"]
    assert change and all("pipeline" in r["arrives"] for r in change)
    assert all("pipeline" not in r["arrives"] for r in rows.values() if r["family"] != "change")


def test_text_listing_and_family_filter() -> None:
    proc = run_cli("kinds", "--family", "dependency")
    assert proc.returncode == 0, proc.stderr
    listed = re.findall(r"^(\S+)  \[(\w+)\]", proc.stdout, re.M)
    assert listed and {family for _, family in listed} == {"dependency"}
    assert {k for k, _ in listed} == {k.name for k in BUILTIN_KINDS if k.family == "dependency"}
    assert "repair: restart the datastore" in proc.stdout
    assert proc.stdout.rstrip().endswith(f"{len(listed)} kinds: {len(listed)} dependency")


def test_a_plugin_kind_is_listed_from_its_entry_point(tmp_path: Path) -> None:
    """A third-party package's kind (its ``sremarathon`` entry point) shows with what it declares;
    undeclared columns stay empty and its docstring stands in for the description."""
    (tmp_path / "acme_kinds.py").write_text('''
import pluggy
from pytest_sremarathon.faults import FaultKind

class PodKill(FaultKind):
    """Deletes one frontend pod.

    More text that is not the summary."""
    name = "acme-pod-kill"
    family = "acme"
    component_form = "service:<app>/frontend"

class Plugin:
    @pluggy.HookimplMarker("pytest")
    def pytest_sremarathon_fault_kinds(self):
        return [PodKill]

plugin = Plugin()
''')
    dist = tmp_path / "acme_kinds-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-kinds\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[sremarathon]\nacme = acme_kinds:plugin\n")
    rows = {r["kind"]: r for r in _catalogue(extra_path=[tmp_path])}
    acme = rows["acme-pod-kill"]
    assert acme["family"] == "acme" and acme["component"] == "service:<app>/frontend"
    assert acme["description"] == "Deletes one frontend pod." and acme["repair"] == "" and acme["judge"] == ""
    assert acme["source"] == "acme_kinds:PodKill"
    assert len(rows) == len(BUILTIN_KINDS) + 1
