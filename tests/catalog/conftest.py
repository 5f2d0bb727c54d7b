from __future__ import annotations

import pytest
from catalog_helpers import make_config

from proxy.catalog import Catalog


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog(make_config(), database="demo", server_version="16.0")
