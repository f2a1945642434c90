"""Fixtures shared by the tests of `sluice controller`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from scheduler.controllers import operator


@pytest.fixture
def logins(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The controller's logins, counted, each giving credentials for a fake server."""
    count: list[int] = []

    async def fake(*args: Any, **kwargs: Any) -> kopf.ConnectionInfo:
        count.append(1)
        return kopf.ConnectionInfo(server="https://api.test")

    monkeypatch.setattr(operator, "obtain_credentials", fake)
    yield count
