"""The API dispatcher (layer 2): every write Sluice makes to the API server.

:class:`ApiDispatcher` (``dispatcher``) takes typed calls (``calls``), keeps one line of
calls per object (``line``) and learns the outcome of lost replies (``outcomes``).
Nothing else in the scheduler calls the write ports of :mod:`scheduler.ports`
(``tests/test_layers.py`` checks it).
"""

from scheduler.dispatch.calls import (
    ApiCall,
    BindPod,
    BindVolume,
    CreateClaim,
    DeallocateClaim,
    DeleteClaim,
    EvictPod,
    ObjectStatusPatch,
    PodStatusPatch,
    ReserveClaim,
    SelectNode,
    UnreserveClaim,
)
from scheduler.dispatch.dispatcher import ApiDispatcher, Ticket
from scheduler.dispatch.outcomes import Outcome, OutcomeResolver, RetryPolicy

__all__ = [
    "ApiCall",
    "ApiDispatcher",
    "BindPod",
    "BindVolume",
    "CreateClaim",
    "DeallocateClaim",
    "DeleteClaim",
    "EvictPod",
    "ObjectStatusPatch",
    "Outcome",
    "OutcomeResolver",
    "PodStatusPatch",
    "ReserveClaim",
    "RetryPolicy",
    "SelectNode",
    "Ticket",
    "UnreserveClaim",
]
