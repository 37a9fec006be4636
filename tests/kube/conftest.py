"""Fixtures for the real-backend tests (helpers in ``support.kube``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from pytest_sremarathon.clock import VirtualClock
from pytest_sremarathon.scenario import load_scenario
from pytest_sremarathon.backends.twin import TwinBackend

from support.admission import RecordingAdmission
from support.kube import ORCHESTRATOR_TOKEN, Upstream, shop_scenario


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    tmp = tmp_path_factory.mktemp("upstream")
    clock = VirtualClock()
    admission = RecordingAdmission()
    backend = TwinBackend(load_scenario(shop_scenario(tmp)), clock, emit=lambda *_: None, admission=admission,
                          private_dir=Path(tempfile.mkdtemp(dir=tmp)), tokens={ORCHESTRATOR_TOKEN: "orchestrator"})
    up = Upstream(backend, clock, admission)
    up.run(150)
    try:
        yield up
    finally:
        backend.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The kind end-to-end tests create a cluster and run for many minutes: only when asked
    for with ``-m kind``."""
    if "kind" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(reason="a kind end-to-end test: run it with `pytest -m kind tests/kube` "
                                   "(needs kind, Docker and the internet)")
    for item in items:
        if item.get_closest_marker("kind") is not None:
            item.add_marker(skip)
