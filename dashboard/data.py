"""The one module that talks to the control plane (and to Prometheus when PROMETHEUS_URL is set).

How and why
-----------
Every page reads through the functions here, never with its own HTTP calls, so timeouts, caching and errors are
the same everywhere:

- reads are ``GET``s with short timeouts (1 s to connect, 3 s to answer), cached with ``st.cache_data`` for
  ``TTL_S`` (one second): five charts refreshing every two seconds cost one request per endpoint, not five;
- a read that fails returns an ``Unavailable`` (what, why, HTTP status or None when nothing answered) instead of
  raising, and pages show it (``ui.show_unavailable``): a dashboard must keep running while the control plane
  restarts;
- changes (``send``) are never cached or retried; they return an ``Outcome`` with the control plane's
  ``{"reason"}`` when it refuses, and the new policy version (the ``X-Policy-Version`` header) when it accepts;
  an accepted change clears the read cache so the next render shows it;
- every ``/v1/state/*`` answer is returned as its ``protocol.state`` model (``STATE_MODELS``), not as its JSON:
  the derivations read attributes, so a field renamed on either side fails here (an ``Unavailable``) or where
  it is read (an AttributeError a test sees), never as a silently empty table;
- history comes from the control plane's in-memory ring (15 minutes at report resolution), its rates taken over
  a span of several reports (``rates``: one interval's rate zigzags with report jitter), or from Prometheus
  when ``Conn.prometheus_url`` is set; either way it is a ``History`` (the control plane's ``HistoryState``
  and whence it came), and if Prometheus fails the control plane answers and the result says so (``source``).

``Conn`` carries the URL, the token and, for a proxy (OIDC sign-in), the principal it acts for
(``X-Original-Principal``); they are part of each cache key, so two principals never share a cached answer. Who
the principal is (``whoami``) and whether it may make a call (``refusal``) come from the control plane, which
applies its own rule: the dashboard keeps no copy of it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import streamlit as st
from pydantic import Field, ValidationError

from dashboard import rates
from metrics.catalogue import BY_NAME
from protocol import state as answers

__all__ = ["Conn", "Unavailable", "Outcome", "History", "health", "participants", "bucket_totals", "shared_summary",
           "shared_limits", "queues", "resource_groups", "adaptive", "policies", "audit", "broker_values",
           "history", "current", "send", "clear_cache", "whoami", "refusal", "TTL_S", "PROMETHEUS_QUERIES",
           "STATE_MODELS", "rate_path", "resource_group_path", "attachment_path", "broker_setting_path",
           "mutation_quota_path"]

TTL_S = 1.0
HISTORY_S = 900.0   # the control plane keeps this much history
TIMEOUT = httpx.Timeout(3.0, connect=1.0)
VERSION_HEADER = "X-Policy-Version"
ORIGINAL_PRINCIPAL = "X-Original-Principal"
Answer = TypeVar("Answer", bound=answers.StateAnswer)   # a state endpoint's model

def _rate(metric: str) -> str:
    return f"sum by (level, kind, name) (rate({BY_NAME[metric].exposed}{{sel}}[{{w}}]))"


def _tokens(dimension: str) -> str:
    return f'sum by (level, kind, name) ({BY_NAME["throttlescope_bucket_tokens"].exposed}' \
           f'{{dimension="{dimension}"{{sep}}{{sel_in}}}})'


# PromQL per history field, from the metrics catalogue ({sel} and {sel_in} take the level/name matchers).
PROMETHEUS_QUERIES = {
    "admittedMsgsPerSecond": _rate("throttlescope_admitted_messages"),
    "admittedBytesPerSecond": _rate("throttlescope_admitted_bytes"),
    "throttleSecondsPerSecond": _rate("throttlescope_throttle_time_seconds"),
    "throttledPerSecond": _rate("throttlescope_throttled"),
    "tokensMsgs": _tokens("msgs"),
    "tokensBytes": _tokens("bytes"),
}


# what each state endpoint answers, as the control plane declares it: every answer is read through its model, so
# a field the two sides disagree on is a clear Unavailable here, not an empty table on a page
STATE_MODELS: dict[str, type[answers.StateAnswer]] = {
    "/v1/state/participants": answers.ParticipantsState, "/v1/state/buckets": answers.BucketsState,
    "/v1/state/queues": answers.QueuesState, "/v1/state/resourcegroups": answers.ResourceGroupsState,
    "/v1/state/history": answers.HistoryState, "/v1/state/shared": answers.SharedState,
    "/v1/state/adaptive": answers.AdaptiveTraceState,
}


class History(answers.HistoryState):
    """The history the pages draw: the control plane's shape whichever source answered, and which did."""

    source: str = Field(description="'control plane', 'Prometheus', or why the control plane answered instead")
    rateSpanSeconds: float = Field(description="The span each rate is taken over (Prometheus: its rate() window)")


@dataclass(frozen=True)
class Conn:
    url: str
    token: str | None = field(default=None, repr=False)
    prometheus_url: str | None = None
    principal: str | None = None     # the principal a proxy token acts for (OIDC sign-in), else None


@dataclass(frozen=True)
class Unavailable:
    """A read that got no usable answer: ``status`` None means nothing answered (down, refused, timed out)."""

    endpoint: str
    reason: str
    status: int | None = None

    @property
    def down(self) -> bool:
        return self.status is None

    @property
    def needs_token(self) -> bool:
        return self.status in (401, 403)


@dataclass(frozen=True)
class Outcome:
    """What a change did: ``ok`` with the new ``version``, or the control plane's ``reason`` for refusing it."""

    ok: bool
    status: int | None
    reason: str = ""
    version: int | None = None
    body: Any = None


def _headers(token: str | None, principal: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return {**headers, ORIGINAL_PRINCIPAL: principal} if token and principal else headers


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("reason"), str):
        return body["reason"]
    return f"HTTP {response.status_code}: {response.text[:200]}"


def _fetch(url: str, token: str | None, path: str, params: tuple[tuple[str, Any], ...] = (),
           principal: str | None = None) -> Any:
    """GET url+path; a state answer as its model (``STATE_MODELS``), any other as the decoded JSON (a text
    answer as a str), or an Unavailable."""
    try:
        response = httpx.get(url + path, params=dict(params), headers=_headers(token, principal), timeout=TIMEOUT)
    except httpx.TransportError as e:
        return Unavailable(path, f"cannot reach the control plane at {url} ({type(e).__name__}: {e})")
    if response.status_code != 200:
        return Unavailable(path, _reason(response), response.status_code)
    if response.headers.get("content-type", "").startswith("text/plain"):
        return response.text                     # a bare name (the resource group of a namespace or tenant)
    try:
        body = response.json()
    except ValueError:
        return Unavailable(path, f"the answer of {path} is not JSON", response.status_code)
    model = STATE_MODELS.get(path)
    if model is None:
        return body
    try:
        answer = model.model_validate(body)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        return Unavailable(path, f"the control plane's answer does not fit this dashboard's {model.__name__} "
                                 f"(at {where or 'the top'}: {first['msg']}); are both the same version?",
                           response.status_code)
    answer.set_age_s(_age_s(response.headers.get("age")))
    return answer


def _age_s(header: str | None) -> float | None:
    """HTTP's ``Age`` (whole seconds; RFC 9111: a non-negative integer), or None when absent or not one."""
    return float(header) if header is not None and header.strip().isdigit() else None


@st.cache_data(ttl=TTL_S, show_spinner=False, max_entries=256)
def _cached(url: str, token: str | None, path: str, params: tuple[tuple[str, Any], ...] = (),
            principal: str | None = None) -> Any:
    return _fetch(url, token, path, params, principal)


def _get(conn: Conn, path: str, params: tuple[tuple[str, Any], ...] = ()) -> Any:
    return _cached(conn.url, conn.token, path, params, conn.principal)


def clear_cache() -> None:
    _cached.clear()
    _prometheus_history.clear()


def health(conn: Conn) -> dict[str, Any] | Unavailable:
    """``/healthz``: status, version, policy version, report interval, uptime (no token needed)."""
    return _cached(conn.url, None, "/healthz")


def _reader(path: str, doc: str) -> Callable[[Conn], dict[str, Any] | Unavailable]:
    """``read(conn)``: the cached answer of ``path`` with the connection's token. Most reads differ only in the
    path, so they are made here rather than written out one by one."""
    def read(conn: Conn) -> dict[str, Any] | Unavailable:
        return _get(conn, path)
    read.__doc__ = doc
    return read


def _state_reader(model: type[Answer], doc: str) -> Callable[[Conn], Answer | Unavailable]:
    """``read(conn)``: the cached answer of the state endpoint whose model is ``model``, as that model. The path
    is looked up in ``STATE_MODELS``, so the reader's return type and the model ``_fetch`` parses with are one."""
    [path] = [p for p, m in STATE_MODELS.items() if m is model]

    def read(conn: Conn) -> Answer | Unavailable:
        return _get(conn, path)
    read.__doc__ = doc
    return read


participants = _state_reader(answers.ParticipantsState, "Live and recently departed participants.")


def bucket_totals(conn: Conn) -> answers.BucketsState | Unavailable:
    """The bucket snapshots summed per limiter, without a row per participant: what the pages show (the rows are
    21.7 MB at 1,000 participants of 100 limits, and parsing them took the dashboard 1.8 s of CPU a refresh)."""
    return _get(conn, "/v1/state/buckets", (("rows", "false"),))


def shared_summary(conn: Conn) -> answers.SharedState | Unavailable:
    """Per shared limit, its limit, usage, demand, grants and how many participants use it, none of them listed:
    what the pages' tables and charts of every limit read (the whole view is 28.6 MB at 1,000 participants of 100
    limits, and parsing it took the dashboard 1.4 s of CPU a refresh)."""
    return _get(conn, "/v1/state/shared", (("participants", "false"),))


def shared_limits(conn: Conn, keys: Sequence[str]) -> answers.SharedState | Unavailable:
    """The shared limits of ``keys`` (``limit_key``s), each with its participants listed: the few a page draws."""
    return _get(conn, "/v1/state/shared", tuple(("key", k) for k in sorted(keys)))


queues = _state_reader(answers.QueuesState, "The latest fairness-queue snapshots (head first).")
resource_groups = _state_reader(answers.ResourceGroupsState, "Per resource group: configured quota, attachments, "
                                "per-participant usage, demand and allocation.")
adaptive = _state_reader(answers.AdaptiveTraceState, "Per adaptive limit, the rate it learnt over the last "
                         "minutes, its ceiling and the sink's answers (a point a second).")
policies = _reader("/v1/policies",
                   "The whole policy document: what every limit is set to right now, and its version.")
broker_values = _reader("/admin/v2/brokers/configuration/runtime",
                        "Every broker dynamic setting's value in force (defaults included).")


whoami = _reader("/v1/whoami", "The principal the connection acts as: name, role, the tenants it administers, "
                 "and the proxy acting for it (if any).")


def audit(conn: Conn, limit: int = 100) -> dict[str, Any] | Unavailable:
    return _get(conn, "/admin/v2/audit", (("limit", limit),))


def refusal(conn: Conn, method: str, path: str) -> str | None:
    """Why the connection's principal may not make this call (the control plane's reason), or None when it may."""
    got = _get(conn, "/v1/whoami/can", (("method", method), ("path", path)))
    if isinstance(got, Unavailable):
        return got.reason
    return None if got.get("allowed") else got.get("reason") or "not allowed"


def history(conn: Conn, seconds: float = 300.0, level: str | None = None,
            name: str | None = None) -> History | Unavailable:
    """Per limiter (``HistorySeries``), ``HistoryPoint``s of the last ``seconds``; ``source`` says whence."""
    if conn.prometheus_url:
        got = _prometheus_history(conn.prometheus_url, seconds, level, name)
        if not isinstance(got, Unavailable):
            return got
    # a span more than is shown: the first point shown gets its rate over a full span too (``rates``)
    params = tuple((k, v) for k, v in (("seconds", min(seconds + rates.span_s(_interval(conn)), HISTORY_S)),
                                       ("level", level), ("name", name)) if v is not None)
    got = _get(conn, "/v1/state/history", params)
    if isinstance(got, Unavailable):
        return got
    shown = rates.smoothed(got, seconds)
    return History(intervalSeconds=shown.intervalSeconds, windowSeconds=shown.windowSeconds, series=shown.series,
                   source="control plane" if not conn.prometheus_url else "control plane (Prometheus did not answer)",
                   rateSpanSeconds=rates.span_s(shown.intervalSeconds))


def _interval(conn: Conn) -> float:
    """The report interval the control plane tells participants (1 s when it does not answer)."""
    got = health(conn)
    return float(got.get("reportIntervalSeconds", 1.0)) if isinstance(got, dict) else 1.0


@st.cache_data(ttl=TTL_S * 2, show_spinner=False, max_entries=64)
def _prometheus_history(prom: str, seconds: float, level: str | None, name: str | None) -> History | Unavailable:
    end = time.time()
    step = max(1.0, seconds / 300)
    window = max(2 * step, 30)
    matchers = ",".join(f'{k}="{v}"' for k, v in (("level", level), ("name", name)) if v)
    merged: dict[tuple[str, str, str], dict[float, dict[str, Any]]] = {}   # per limiter, per time, its fields
    for field_name, template in PROMETHEUS_QUERIES.items():
        query = (template.replace("{sel}", "{" + matchers + "}" if matchers else "")
                 .replace("{sel_in}", matchers).replace("{sep}", "," if matchers else "")
                 .replace("{w}", f"{window:g}s"))
        try:
            response = httpx.get(f"{prom}/api/v1/query_range", timeout=TIMEOUT, params={
                "query": query, "start": end - seconds, "end": end, "step": step})
            result = response.json()["data"]["result"] if response.status_code == 200 else None
        except (httpx.TransportError, ValueError, KeyError, TypeError):
            result = None
        if result is None:
            return Unavailable("/api/v1/query_range", f"Prometheus at {prom} did not answer {query!r}")
        for series in result:
            m = series.get("metric", {})
            key = (m.get("level", ""), m.get("kind", "publish"), m.get("name", ""))
            for t, value in series.get("values", []):
                v = float(value)
                point = merged.setdefault(key, {}).setdefault(float(t), {"t": float(t)})
                point[field_name] = v if math.isfinite(v) else None
    # the control plane's own models, so the pages read one shape whichever source answered
    series = [answers.HistorySeries(level=key[0], kind=key[1], name=key[2],
                                    points=[answers.HistoryPoint.model_validate(p) for _, p in sorted(points.items())])
              for key, points in sorted(merged.items())]
    return History(intervalSeconds=step, windowSeconds=seconds, series=series, source="Prometheus",
                   rateSpanSeconds=window)


def current(conn: Conn, path: str) -> Any:
    """The current value behind an admin GET (uncached, for the old side of old -> new); None when not set (204,
    as Pulsar answers an unset policy or attachment, or 404 for a resource group that does not exist); an
    attachment, which is answered as the bare name, as ``{"resourceGroup": name}``."""
    got = _fetch(conn.url, conn.token, path, principal=conn.principal)
    if isinstance(got, Unavailable) and got.status in (204, 404):
        return None
    return {"resourceGroup": got} if isinstance(got, str) else got


def send(conn: Conn, method: str, path: str, body: Any = None) -> Outcome:
    """One change (PUT/POST/DELETE) with the signed-in principal's credentials; never cached, never retried. The
    control plane records it under that principal's name."""
    try:
        response = httpx.request(method, conn.url + path, json=body, headers=_headers(conn.token, conn.principal),
                                 timeout=TIMEOUT)
    except httpx.TransportError as e:
        return Outcome(False, None, f"cannot reach the control plane at {conn.url} ({type(e).__name__}: {e})")
    if response.status_code >= 400:
        return Outcome(False, response.status_code, _reason(response))
    version = response.headers.get(VERSION_HEADER)
    clear_cache()
    try:
        answer = response.json() if response.content else None
    except ValueError:
        answer = None
    return Outcome(True, response.status_code, version=int(version) if version and version.isdigit() else None,
                   body=answer)


# --- the admin API's paths (Pulsar's REST shapes): the one place the dashboard spells them -------------------

_RATE_BASES = {"namespace": "namespaces", "topic": "persistent", "tenant": "tenants"}


def rate_path(scope: str, target: str, policy: str) -> str:
    """A rate policy's path: ``scope`` 'namespace' ('tenant/ns'), 'topic' ('tenant/ns/topic') or 'tenant';
    ``policy`` publishRate, dispatchRate or subscriptionDispatchRate."""
    return f"/admin/v2/{_RATE_BASES[scope]}/{target}/{policy}"


def resource_group_path(name: str) -> str:
    return f"/admin/v2/resourcegroups/{name}"


def attachment_path(target: str, group: str | None = None) -> str:
    """Where a namespace ('tenant/ns') or a tenant is attached to a resource group (``group``: to attach it)."""
    path = f"/admin/v2/{'namespaces' if '/' in target else 'tenants'}/{target}/resourcegroup"
    return path if group is None else f"{path}/{group}"


def broker_setting_path(name: str, value_text: str) -> str:
    return f"/admin/v2/brokers/configuration/{name}/{value_text}"


def mutation_quota_path(user: str, client_id: str) -> str:
    return f"/admin/v2/quotas/mutations/{quote(user, safe='')}/{quote(client_id, safe='')}"
