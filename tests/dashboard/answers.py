"""The control plane's answers as the dashboard reads them, for the tests of its pure modules: the JSON a state
endpoint sends, parsed through the model ``dashboard.data`` parses it with (``data.STATE_MODELS``).

A test writes the fields its rule reads as JSON literals; ``participant``, ``bucket`` and ``resource_group`` add
the fields the control plane always sends besides (who reported, when), so each literal stays about what it
tests and still parses as a real answer would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from dashboard import data
from protocol.state import BucketsState, HistoryState, ParticipantsState, ResourceGroupsState, SharedState

__all__ = ["state", "participant", "departed", "participants", "history", "bucket", "buckets", "resource_group",
           "resource_groups", "shared"]

Model = TypeVar("Model", bound=BaseModel)
JSON = dict[str, Any]


def state(endpoint: str, body: JSON) -> Any:
    """``body`` read as the dashboard reads the answer of ``endpoint`` ("/v1/state/buckets")."""
    return data.STATE_MODELS[endpoint].model_validate(body)


def _as(model: type[Model], endpoint: str, body: JSON) -> Model:
    got = state(endpoint, body)
    assert isinstance(got, model), (endpoint, type(got))
    return got


def participant(pid: str = "p1", **fields: Any) -> JSON:
    """One entry of /v1/state/participants: ``fields`` over what every live participant's entry carries."""
    return {"participantId": pid, "applicationId": "app-1", "executorId": "1", "host": "h", "pid": 1,
            "firstSeen": 0.0, "lastSeen": 0.0, "secondsSinceLastSeen": 0.0, "appliedPolicyVersion": 1,
            "upToDate": True, "seq": 1, "reports": 1, "intervalSeconds": 1.0, **fields}


def departed(pid: str = "gone", **fields: Any) -> JSON:
    return participant(pid, **{"upToDate": None, "departedBecause": "expired", "departedAt": 0.0, **fields})


def participants(alive: Sequence[JSON] = (), gone: Sequence[JSON] = (), interval_s: float = 1.0,
                 version: int = 1) -> ParticipantsState:
    return _as(ParticipantsState, "/v1/state/participants", {
        "policyVersion": version, "reportIntervalSeconds": interval_s, "participants": list(alive),
        "departed": list(gone)})


def history(series: Sequence[JSON], interval_s: float = 1.0) -> HistoryState:
    return _as(HistoryState, "/v1/state/history",
               {"intervalSeconds": interval_s, "windowSeconds": 900.0, "series": list(series)})


def bucket(level: str, name: str, kind: str = "publish", **fields: Any) -> JSON:
    """One participant's bucket in /v1/state/buckets (``msgs``/``bytes`` absent: unlimited)."""
    return {"participantId": "p1", "level": level, "name": name, "kind": kind, "reportedAt": 0.0, **fields}


def buckets(rows: Sequence[JSON] = (), totals: Sequence[JSON] = ()) -> BucketsState:
    return _as(BucketsState, "/v1/state/buckets", {"buckets": list(rows), "totals": list(totals)})


def resource_group(name: str, **fields: Any) -> JSON:
    """One group of /v1/state/resourcegroups: ``fields`` over an unlimited group attached to nothing."""
    unlimited = {"quotaMsgsPerSecond": -1, "quotaBytesPerSecond": -1}
    return {"name": name, "configured": {}, "strategy": "fair", "publish": unlimited, "dispatch": unlimited,
            **fields}


def resource_groups(groups: Sequence[JSON]) -> ResourceGroupsState:
    return _as(ResourceGroupsState, "/v1/state/resourcegroups",
               {"policyVersion": 1, "strategy": "fair", "resourceGroups": list(groups)})


def shared(limits: Sequence[JSON], learning: bool = False) -> SharedState:
    return _as(SharedState, "/v1/state/shared", {"policyVersion": 1, "learning": learning, "limits": list(limits)})
