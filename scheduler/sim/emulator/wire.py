"""What the Kubernetes API emulator's handlers share of a request and a response
(layer 4, sim emulator): the :class:`Target` a path names, the JSON body read and its
kind, apiVersion, name and namespace checked against the path (:func:`incoming`), a
JSON response, and the query's switches (:func:`truthy`, :func:`wants_table`). The
aiohttp side of :mod:`.responses`, which stays pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from scheduler.sim.emulator.resource_catalog import ResourceInfo
from scheduler.sim.emulator.responses import JSON, bad_request, dumps

__all__ = [
    "Target",
    "incoming",
    "json_response",
    "parse_json",
    "read_body",
    "truthy",
    "wants_table",
]

_TRUE: Final = frozenset({"1", "t", "T", "true", "TRUE", "True"})


@dataclass(slots=True)
class Target:
    """What a request's path names."""

    res: ResourceInfo
    namespace: str | None
    name: str = ""
    sub: str = ""


def truthy(value: str | None) -> bool:
    """Is a boolean query parameter set, as the API server parses it?"""
    return value is not None and value in _TRUE


def json_response(status: int, body: Any) -> web.Response:
    return web.Response(status=status, body=dumps(body), content_type=JSON)


def wants_table(request: web.Request) -> bool:
    """Does the request ask for a ``Table`` (``kubectl get``)?"""
    return "as=Table" in request.headers.get("Accept", "")


def parse_json(text: str) -> Any:
    """The JSON of a request body; 400 BadRequest when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from exc


async def read_body(request: web.Request) -> dict[str, Any]:
    """The request's body, a JSON object; 400 BadRequest otherwise."""
    body = parse_json(await request.text())
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def incoming(t: Target, body: dict[str, Any], name: str = "") -> dict[str, Any]:
    """Check and complete the kind, apiVersion, name and namespace of a written object."""
    res = t.res
    kind = body.setdefault("kind", res.kind)
    api_version = body.setdefault("apiVersion", res.api_version)
    if kind != res.kind or api_version != res.api_version:
        raise bad_request(
            f"the object's kind and apiVersion ({api_version}, {kind}) do not match the "
            f"resource ({res.api_version}, {res.kind})"
        )
    meta = body.get("metadata")
    if meta is None:
        meta = body["metadata"] = {}
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    if name and meta.setdefault("name", name) != name:
        raise bad_request(
            "the name of the object does not match the name on the URL"
            f" ({meta['name']!r} != {name!r})"
        )
    if (
        res.namespaced
        and t.namespace is not None
        and meta.setdefault("namespace", t.namespace) != t.namespace
    ):
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    return body
