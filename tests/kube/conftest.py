"""Fixtures for the real-backend tests (helpers in ``support.kube``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.kube import Upstream


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    up = Upstream(tmp_path_factory.mktemp("upstream"))
    up.run(150)
    try:
        yield up
    finally:
        up.close()


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
