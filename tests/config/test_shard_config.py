"""The shard section of the configuration: ``shards``, ``shard``, ``shardLabel``, and
``sluice run --shard``."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api.errors import ConfigError
from scheduler.api.shards import POOL_LABEL, ShardSpec
from scheduler.config import (
    configuration_document,
    parse_configuration,
    with_shard,
)

SHARDS = [{"name": "a", "nodePool": "pool-a"}, {"name": "b", "nodePool": "pool-b"}]


def parse(**fields: Any) -> Any:
    return parse_configuration(
        {"apiVersion": L.API_VERSION, "kind": "SchedulerConfiguration", **fields}
    )


def test_a_shard_of_the_list() -> None:
    config = parse(shards=SHARDS, shard="b", shardLabel="example.com/pool")
    sharding = config.sharding()
    assert sharding is not None
    assert sharding.mine == ShardSpec("b", "pool-b") and sharding.label == "example.com/pool"
    assert sharding.listed
    assert parse_configuration(configuration_document(config)) == config


def test_no_shard_no_sharding_and_a_shard_alone_owns_its_namesake_pool() -> None:
    assert parse().sharding() is None
    alone = with_shard(parse(), "gpu").sharding()
    assert alone is not None and alone.shards == (ShardSpec("gpu", "gpu"),)
    assert not alone.listed and not alone.reports_orphans
    assert alone.label == POOL_LABEL


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        pytest.param({"shards": []}, "shards", id="an empty list"),
        pytest.param({"shards": [{"name": "A_B"}]}, "shards[0].name", id="not a DNS label"),
        pytest.param(
            {"shards": [*SHARDS, {"name": "a", "nodePool": "z"}]},
            "shards[2].name",
            id="a name twice",
        ),
        pytest.param(
            {"shards": [*SHARDS, {"name": "c", "nodePool": "pool-a"}]},
            "shards[2].nodePool",
            id="a pool twice",
        ),
        pytest.param(
            {"shards": [{"name": "a", "pool": "x"}]}, "shards[0].pool", id="an unknown field"
        ),
        pytest.param({"shards": SHARDS, "shard": "c"}, "shard", id="a shard not listed"),
        pytest.param({"shardLabel": ""}, "shardLabel", id="no label"),
    ],
)
def test_a_bad_shard_section_names_the_field(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(**fields)
    assert caught.value.field == where


def test_the_command_line_shard_must_be_listed() -> None:
    with pytest.raises(ConfigError, match="no shard 'c'"):
        with_shard(parse(shards=SHARDS), "c")
    config = with_shard(parse(shards=SHARDS, shard="a"), "b")
    assert config.shard == "b"
