"""The one exception tree of Sluice (layer 0).

::

    SluiceError
    ├── InvalidInputError          bad user input; names the object and the field
    │   ├── QuantityError          a malformed Kubernetes quantity
    │   ├── ConfigError            a bad SchedulerConfiguration or --feature-gates value
    │   └── ScenarioError          a bad simulation scenario (unknown kind, duplicates, ...)
    ├── RegistryError              a duplicate or unknown plugin / action name
    ├── InvariantError             an internal rule was about to be broken (a bug, not input)
    │   ├── AllocationError        a node would be over-allocated
    │   └── SessionCorruptedError  a rollback failed: the cycle's session cannot be trusted
    ├── PluginError                a plugin raised; names the plugin and the extension point
    └── ApiError                   a call to the API server (real or embedded) failed
        ├── NotFoundError          404
        ├── AlreadyExistsError     409 on create
        ├── ConflictError          409: resourceVersion/uid precondition, pod already bound
        ├── InvalidObjectError     422: the object fails validation; carries field causes
        ├── GoneError              410: the resourceVersion of a watch is too old
        ├── TooManyRequestsError   429: an eviction refused by a PodDisruptionBudget, rate limits
        └── ServerError            the request was refused or never sent (cannot connect,
            │                      injected refusal): it did not take effect; retry later
            ├── NamespaceTerminatingError  403: nothing new may be made in a namespace
            │                      being deleted (a binding, an eviction, an Event)
            └── AmbiguousError     the outcome is unknown: 5xx, a timeout, the connection
                                   reset or closed before the reply, a reply that cannot
                                   be read. A write may have taken effect

Expected outcomes (a pod does not fit) are values, never exceptions. Adapters translate
library errors into this tree and chain them with ``raise ... from``.

Refused or ambiguous: a ServerError that is not an AmbiguousError means the call did not
take effect, so its caller may undo what it assumed of it. An AmbiguousError does not say:
the caller keeps its assumption until it learns the outcome (an event shows it, or a read
of the object does), as the loop does for binds and the preemption executor for evictions
and status patches. Code that only retries catches ServerError and gets both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class SluiceError(Exception):
    """Root of every error Sluice raises on purpose."""


class InvalidInputError(SluiceError):
    """User input that cannot be accepted. ``str()`` is one line naming object and field."""

    def __init__(self, obj: str, field: str | None, message: str) -> None:
        self.obj = obj
        self.field = field
        self.message = message
        where = f"{obj}: {field}" if field else obj
        super().__init__(f"{where}: {message}")


class QuantityError(InvalidInputError):
    """A Kubernetes quantity that does not parse (``12x``, ``1..5``, ``--1``)."""


class ConfigError(InvalidInputError):
    """A SchedulerConfiguration that cannot be loaded."""


class ScenarioError(InvalidInputError):
    """A simulation scenario that cannot be loaded."""


class RegistryError(SluiceError):
    """A duplicate registration, or a lookup of a name that was never registered."""


class InvariantError(SluiceError):
    """An internal invariant was about to be violated: a bug in Sluice, never user input."""


class AllocationError(InvariantError):
    """Placing a task would over-allocate a node, or remove a task that is not there."""


class SessionCorruptedError(InvariantError):
    """Undoing a decision failed (a plugin raised while a statement rolled back): the
    session no longer matches its snapshot, so the whole cycle is thrown away."""


class PluginError(SluiceError):
    """A plugin raised inside an extension point. Chained (``from``) to what it raised.

    The framework raises it where it calls the plugin; the per-job boundary of the actions
    turns it into a ``SchedulerError`` for that job only.
    """

    def __init__(self, plugin: str, point: str, cause: BaseException) -> None:
        self.plugin = plugin
        self.point = point
        self.cause = cause
        super().__init__(f"plugin {plugin!r} failed in {point}: {type(cause).__name__}: {cause}")
        self.__cause__ = cause  # chained even where it is built apart from its raise


class ApiError(SluiceError):
    """A call to the API server failed. ``code`` is the HTTP status it maps to."""

    code: int = 500

    def __init__(self, message: str, *, kind: str = "", name: str = "") -> None:
        self.kind = kind
        self.name = name
        super().__init__(message)


class NotFoundError(ApiError):
    code = 404


class AlreadyExistsError(ApiError):
    code = 409


class ConflictError(ApiError):
    code = 409


@dataclass(frozen=True, slots=True)
class FieldCause:
    """One reason an object is invalid: the JSON path of the field and what is wrong."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class InvalidObjectError(ApiError):
    """422: the object fails validation. ``causes`` name each bad field."""

    code = 422

    def __init__(
        self, message: str, *, kind: str = "", name: str = "", causes: tuple[FieldCause, ...] = ()
    ) -> None:
        self.causes = causes
        super().__init__(message, kind=kind, name=name)


class GoneError(ApiError):
    code = 410


class TooManyRequestsError(ApiError):
    code = 429


class ServerError(ApiError):
    """The call failed and did not take effect (refused before it was applied, or never
    sent). Retry later. Its subclass :class:`AmbiguousError` is the exception."""

    code = 500


class NamespaceTerminatingError(ServerError):
    """The API server's NamespaceLifecycle admission refused a create (a binding, an
    eviction, an Event) because the object's namespace is being deleted (a 403 whose
    ``Status`` names the cause ``NamespaceTerminating``). Not a refusal by RBAC, and
    nothing to retry: the namespace controller is deleting the pods it names. Callers
    drop the write quietly."""

    code = 403


class AmbiguousError(ServerError):
    """The call's outcome is unknown: the server answered 5xx, the request timed out, or the
    connection was reset or closed before the reply could be read. A write may have been
    applied. Callers that assumed its effect keep the assumption until they learn the
    outcome (see the module docstring)."""


_ASSIGNED = re.compile(r'already assigned to node "([^"]+)"')


def assigned_node(exc: ApiError) -> str:
    """The node a 409 on a binding says the pod is already assigned to (the API server's
    message: ``pod ns/name is already assigned to node "n1"``), or "" if it names none."""
    if not isinstance(exc, ConflictError):
        return ""
    m = _ASSIGNED.search(str(exc))
    return m.group(1) if m else ""
