"""Fixtures shared by the privacy-unit tests."""

from __future__ import annotations

import pytest

from support.service import Service, make_config


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The demo service with its DuckDB file held read-only, as ``dpgate serve`` holds it once the
    start's writes are made (so its tables are frozen: ``Backend.frozen``)."""
    svc = Service(make_config(), tmp_path_factory.mktemp("served")).start()
    svc.gw.backend.reopen_read_only()
    yield svc
    svc.close()
