"""pytest-xdist support: which process this is, the ``--dist`` a marathon needs, and what the
controller and its workers hand each other.

A marathon's segment items must run in one process, in order: each is a window of one run.
So every item of a marathon carries ``xdist_group(name=<GROUP_PREFIX><scenario>-seed<N>)``, and
with ``-n`` and no ``--dist`` the plugin picks ``loadgroup``. What an item found rides on its
report (serialised by xdist), so the controller keeps the scoreboard; what no report carried
(runs sealed when a worker's session ended) comes back in the worker's ``workeroutput``.

Light (no xdist import): the helpers only read attributes xdist sets on the config and nodes.
"""

from __future__ import annotations

from typing import Any

import pytest

from .settings import agent_given

#: The start of the ``xdist_group`` names of marathon items (see ``MarathonTarget.group``).
GROUP_PREFIX = "sremarathon-"
#: Set on the controller when the plugin chose ``--dist loadgroup`` (the report header says so).
AUTO_DIST_KEY = pytest.StashKey[bool]()
_OUTPUT = "sremarathon"  # the workeroutput key of the results no report carried


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def distributing(config: pytest.Config) -> bool:
    """Is this the controller of an xdist run (which collects nothing itself)?"""
    return (not is_worker(config) and getattr(config.option, "dist", "no") != "no"
            and bool(getattr(config.option, "tx", None)) and not config.getoption("collectonly", False))


def choose_dist(config: pytest.Config) -> None:
    """With ``-n`` and no ``--dist``, pick ``loadgroup`` so that each marathon stays on one
    worker, in segment order (before xdist picks ``load``, which would split a marathon); a
    ``--dist`` that would split one is a usage error."""
    option = config.option
    if not getattr(option, "numprocesses", None) or not hasattr(option, "dist"):
        return
    if not agent_given(config):
        return  # no marathon can run: leave the user's tests alone
    if option.dist == "no" and not getattr(option, "distload", False):
        option.dist = "loadgroup"
        config.stash[AUTO_DIST_KEY] = True
    elif option.dist in ("load", "worksteal"):
        raise pytest.UsageError(
            f"--dist {option.dist} would split a marathon's segments across workers (each would run its own "
            f"copy of the marathon); use --dist loadgroup, or leave --dist out with -n and it is chosen for you")


def hand_to_worker(config: pytest.Config, node: Any, agent_checked: bool) -> None:
    """On the controller, for each new worker: the decisions the worker cannot make itself."""
    if config.stash.get(AUTO_DIST_KEY, False):
        node.workerinput["sremarathon_loadgroup"] = True
    node.workerinput["sremarathon_agent_checked"] = agent_checked


def take_from_controller(config: pytest.Config) -> bool:
    """On a worker, at configure time: apply what the controller handed over; whether the
    controller already checked that the agent loads (then the worker does not check again)."""
    workerinput = getattr(config, "workerinput", {})
    if workerinput.get("sremarathon_loadgroup"):
        # Workers parse the original command line (no --dist there): tell xdist's worker side
        # that the controller schedules by group, so it suffixes node ids with "@<group>".
        config.option.loadgroup = True
    return bool(workerinput.get("sremarathon_agent_checked"))


def publish_from_worker(config: pytest.Config, data: dict[str, Any]) -> None:
    """On a worker: a sealed run's result that no report carried, for the controller."""
    config.workeroutput.setdefault(_OUTPUT, []).append(data)  # type: ignore[attr-defined]


def results_from_worker(node: Any) -> list[dict[str, Any]]:
    """On the controller, once a worker is down: what it published."""
    return list(getattr(node, "workeroutput", {}).get(_OUTPUT, []))


def strip_group(nodeid: str) -> str:
    """xdist's loadgroup appends ``@<group>`` to node ids on workers."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


def add_group_suffixes(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker under ``loadgroup``: make sure our items carry the ``@<group>``
    node id suffix the controller groups by. xdist 3.8 sets it through ``item._nodeid``,
    which pytest ≥ 9.2 no longer reads (pytest-xdist#1386), so our marathons would be split
    across workers; set it on the structured id when xdist's did not take. Must run after
    xdist's own ``pytest_collection_modifyitems``."""
    if not (is_worker(config) and getattr(config.option, "loadgroup", False)):
        return
    for item in items:
        groups = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                  for m in item.iter_markers("xdist_group")}
        if not any(g.startswith(GROUP_PREFIX) for g in groups):
            continue
        nodeid = item.nodeid
        if nodeid.rfind("@") > nodeid.rfind("]"):
            continue  # xdist's suffix took
        _set_nodeid(item, f"{nodeid}@{'_'.join(sorted(groups))}")


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    if hasattr(item, "_id"):  # pytest ≥ 9.2: structured node ids
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(nodeid)
    else:  # pragma: no cover - older pytest (where xdist's own suffix takes)
        item._nodeid = nodeid  # type: ignore[attr-defined]
