"""``kubectl sluice queues`` as it draws the queue tree from the listed Queues of both APIs
(scheduler.cli.kubectl): Volcano's root is the root of the tree, not a queue beside the
others; Volcano's guarantee is read from its own field."""

from __future__ import annotations

import argparse
import io
from typing import Any

from scheduler.api.group_apis import VOLCANO
from scheduler.cli.kubectl import _queues


def _queue(api_version: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def _drawn(listed: dict[str, list[dict[str, Any]]]) -> list[tuple[str, str, str]]:
    """(name with its indent, API, GUARANTEE) of each row, in order."""
    out = io.StringIO()
    _queues(listed, argparse.Namespace(output="text"), out)
    rows = out.getvalue().splitlines()
    header = rows[0].split()
    api_at, guarantee_at = header.index("API"), header.index("GUARANTEE")
    drawn = []
    for row in rows[1:]:
        cells = row.split()
        indent = len(row) - len(row.lstrip())
        drawn.append((" " * indent + cells[0], cells[api_at], cells[guarantee_at]))
    return drawn


def test_volcanos_root_is_the_root_of_the_tree() -> None:
    listed = {
        "Queue": [_queue("scheduling.sluice.dev/v1alpha1", "org", {"guarantee": {"cpu": "1"}})],
        VOLCANO.queue_key: [
            _queue(VOLCANO.api_version, "root", {"weight": 1}),
            _queue(
                VOLCANO.api_version,
                "team",
                {"parent": "root", "guarantee": {"resource": {"cpu": "2"}}},
            ),
            _queue(VOLCANO.api_version, "sub", {"parent": "team"}),
        ],
    }
    assert _drawn(listed) == [
        ("root", "volcano", "<none>"),
        ("  org", "sluice", "cpu=1"),
        ("  team", "volcano", "cpu=2"),
        ("    sub", "volcano", "<none>"),
    ]


def test_without_volcanos_root_top_level_queues_are_roots() -> None:
    listed = {
        VOLCANO.queue_key: [
            _queue(VOLCANO.api_version, "team", {"parent": "root"}),
            _queue(VOLCANO.api_version, "solo", {}),
        ],
    }
    assert [name for name, _, _ in _drawn(listed)] == ["solo", "team"]
