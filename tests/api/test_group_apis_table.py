"""The one table of gang APIs (scheduler.api.group_apis.table): every row has its
implementation, in the rows' order, and every implementation answers the protocol."""

from __future__ import annotations

import inspect

from scheduler.api.group_apis import APIS, SLUICE, VOLCANO
from scheduler.api.group_apis.protocol import GroupApiProtocol
from scheduler.api.group_apis.table import BY_GROUP_KIND, BY_QUEUE_KIND, GROUP_APIS, of_job


def test_the_table_holds_every_row_in_order() -> None:
    assert tuple(g.api for g in GROUP_APIS) == APIS
    assert [g.api for g in BY_GROUP_KIND.values()] == list(APIS)
    assert [g.api for g in BY_QUEUE_KIND.values()] == [SLUICE, VOLCANO]  # Sluice's first


def test_every_api_implements_every_method_of_the_protocol() -> None:
    methods = {
        name
        for name, _ in inspect.getmembers(GroupApiProtocol, inspect.isfunction)
        if not name.startswith("_")
    }
    assert methods >= {"read_group", "read_queue", "queue_of", "group_status", "queue_status"}
    for g in GROUP_APIS:
        missing = {m for m in methods if not callable(getattr(type(g), m, None))}
        assert not missing, f"{g.api.title} lacks {sorted(missing)}"


def test_a_job_id_names_its_api() -> None:
    assert of_job("ml/train").api is SLUICE
    assert of_job("volcano:ml/train").api is VOLCANO
    assert of_job("ml/lone-pod").api is SLUICE
