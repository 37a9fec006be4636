"""JUnit XML (``--junitxml``): what the plugin adds to pytest's own writer.

* testcase names: ``classname="marathon.yaml" name="marathon[seed=1]::segment-01"`` for a
  segment (pytest would read the bracket of the middle component as parameters), and no
  ``@<group>`` suffix from xdist's loadgroup;
* ``[[ATTACHMENT|<bundle>]]`` first in a segment's ``<system-out>`` (Jenkins' junit-attachments,
  GitLab's artifacts);
* ``<testsuite>`` properties per marathon (score, declared-done gap, bundle …), from the
  scoreboard, so that they are the same with xdist.

Nothing here runs without ``--junitxml``: pytest's writer is looked up in the config's stash.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Optional

import pytest

from .distributed import is_worker
from .scoreboard import Scoreboard


def xml_of(config: pytest.Config) -> Any:
    """pytest's JUnit writer (``LogXML``) of this session, or None without ``--junitxml``."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - a pytest without the private key
        return None
    return config.stash.get(xml_key, None)


def testcase_names(nodeid: str, segment: bool) -> tuple[str, str]:
    """(classname, name) of a testcase: ``marathon.yaml`` / ``marathon[seed=1]::segment-01`` for
    a segment; what pytest gives a test function otherwise."""
    path, _, rest = nodeid.partition("::")
    if segment:
        return path.replace("/", "."), rest
    from _pytest.junitxml import mangle_test_address

    names = mangle_test_address(nodeid)
    return ".".join(names[:-1]), names[-1]


class Testcases:
    """Names the testcases of the plugin's items and attaches their bundles, one report at a
    time (from ``pytest_runtest_logreport``, on the controller with xdist)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._pending: dict[tuple[str, Any], str] = {}  # (node id, xdist node) -> bundle to attach

    def name(self, report: pytest.TestReport, nodeid: str, segment: bool, bundle: Optional[str]) -> Any:
        """Give the report's testcase its plain names (before pytest's writer sees the report);
        the testcase's reporter, or None without ``--junitxml``. ``bundle`` is attached once the
        testcase is complete (:meth:`finish`)."""
        xml = xml_of(self.config)
        if xml is None:
            return None
        reporter = xml.node_reporter(report)
        classname, name = testcase_names(nodeid, segment)
        reporter.add_attribute("classname", f"{xml.prefix}.{classname}" if xml.prefix else classname)
        reporter.add_attribute("name", name)
        if bundle:
            self._pending[(report.nodeid, getattr(report, "node", None))] = bundle
        return reporter

    def finish(self, report: pytest.TestReport, reporter: Any) -> None:
        """After pytest's writer handled a teardown report: attach the testcase's bundle."""
        bundle = self._pending.pop((report.nodeid, getattr(report, "node", None)), None)
        if bundle:
            attach(reporter, bundle)


def attach(reporter: Any, bundle: str) -> None:
    """Put ``[[ATTACHMENT|bundle]]`` first in the testcase's one ``<system-out>``.

    Jenkins' junit-attachments reads every such line of a testcase's output; GitLab reads the
    first one, of failed testcases only, and breaks on a testcase with two ``system-out``
    elements. So: prepend to pytest's element when ``junit_logging`` wrote one, else add it.
    Runs after pytest finalized the testcase (its element is then frozen and kept as is).
    """
    if "to_xml" not in vars(reporter):  # not finalized (never happens with pytest's writer)
        return
    element = reporter.to_xml()
    line = f"[[ATTACHMENT|{bundle}]]"
    outs = element.findall("system-out")
    if outs:
        text = outs[0].text or ""
        if line not in text:
            outs[0].text = line + "\n" + text
        return
    out = ET.Element("system-out")
    out.text = line + "\n"
    errs = [i for i, child in enumerate(element) if child.tag == "system-err"]
    if errs:
        element.insert(errs[0], out)
    else:
        element.append(out)


def suite_properties(config: pytest.Config, board: Scoreboard) -> None:
    """JUnit ``<testsuite>`` properties per marathon, from the scoreboard (so with xdist too).
    Must run before pytest's writer writes the file (its ``pytest_sessionfinish``)."""
    xml = xml_of(config)
    if xml is None or is_worker(config):
        return
    for key in sorted(board.rows):
        row = board.rows[key]
        if row.final:
            xml.add_global_property(f"sremarathon_score:{key}", f"{row.final['score']:.2f}")
            xml.add_global_property(f"sremarathon_declared_done_gap:{key}", f"{row.final['declared_done_gap']:.2f}")
            xml.add_global_property(f"sremarathon_localization_credit:{key}",
                                    f"{row.final.get('localization_credit', 0):.3f}")
            xml.add_global_property(f"sremarathon_scoring_version:{key}", str(row.final.get("scoring_version", 1)))
            xml.add_global_property(f"sremarathon_collateral:{key}", " ".join(
                f"{category}={n}" for category, n in sorted((row.final.get("collateral") or {}).items())))
            xml.add_global_property(f"sremarathon_bundle:{key}", row.bundle)
