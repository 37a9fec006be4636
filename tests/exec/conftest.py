"""Fixtures for the exec tests: the fake container view (exec_fixtures.py) and the test-only
API server in front of it (exec_server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.exec_fixtures import make_container
from support.exec_server import ExecTestServer, Pod

from pytest_sremarathon.exec import StaticContainer


@pytest.fixture
def container() -> StaticContainer:
    return make_container()


@pytest.fixture
def exec_server() -> Iterator[ExecTestServer]:
    server = ExecTestServer({
        ("shop", "cart-7d9f8b-x2x"): Pod(make_container()),
        ("default", "p"): Pod(make_container(hostname="p")),
        ("default", "two"): Pod(make_container(hostname="two"), containers=["app", "sidecar"]),
    })
    yield server
    server.close()
