"""ParticipantFastPath: a valid report is answered without FastAPI; everything else reaches the route unchanged."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from controlplane import views
from controlplane.api_participant import ParticipantFastPath, answer_report, given_up_s
from controlplane.auth import Tokens
from controlplane.config import Settings
from controlplane.context import Context
from controlplane.grants import GrantBook
from controlplane.principals import Directory
from controlplane.report_pace import ReportPace
from controlplane.state import LiveState
from controlplane.store import Store
from protocol import Report, ReportResponse

from .conftest import ADMIN, PARTICIPANT, report, usage

pytestmark = pytest.mark.unit


class Route:
    """Stands where FastAPI's routes are: records what reaches it and answers 299."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], bytes]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.calls.append((scope, body))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def ctx(tmp_path: Path) -> Any:
    store = Store(tmp_path)
    yield Context(settings=Settings(data_dir=tmp_path), store=store, live=LiveState(1.0),
                  directory=Directory(store, Tokens(ADMIN, PARTICIPANT)),
                  grants=GrantBook(1.0), pace=ReportPace(1.0, 10.0, 0.6))
    store.close()


def exchange(app: Any, body: bytes, method: str = "POST", path: str = "/v1/report",
             content_type: bytes | None = b"application/json", chunks: int = 1,
             headers: tuple[tuple[bytes, bytes], ...] = (), sent: list[Any] | None = None) -> list[Any]:
    """Run one request through ``app``; the messages it sent, appended to ``sent`` (a fresh list by default)."""
    scope = {"type": "http", "method": method, "path": path,
             "headers": ([] if content_type is None else [(b"Content-Type", content_type)]) + list(headers)}
    step = max(1, -(-len(body) // chunks))
    parts = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
    messages = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    out: list[Any] = [] if sent is None else sent

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    asyncio.run(app(scope, receive, send))
    return out


def call(app: Any, body: bytes, method: str = "POST", path: str = "/v1/report",
         content_type: bytes | None = b"application/json", chunks: int = 1) -> tuple[int, bytes]:
    sent = exchange(app, body, method, path, content_type, chunks)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_valid_report_is_answered_without_the_route(ctx: Context) -> None:
    route = Route()
    body = json.dumps(report("p1", usage=[usage("rg", 5)])).encode()
    status, answer = call(ParticipantFastPath(route, ctx), body, chunks=3)
    assert status == 200 and route.calls == []
    parsed = ReportResponse.model_validate_json(answer)
    assert parsed.accepted and parsed.policyVersion == 1 and parsed.policies is not None
    assert parsed.usage["resource_group:publish:rg"]["p1"].usage_msgs_per_s == 5
    assert [p.participantId for p in views.participants(ctx.live, 1).participants] == ["p1"]


def test_the_answer_is_the_routes_answer(ctx: Context) -> None:
    """Both paths render with answer_report: what the fast path sends is what the route would have sent."""
    route = Route()
    status, answer = call(ParticipantFastPath(route, ctx), json.dumps(report("p1", seq=1, applied=1)).encode(),
                          content_type=b"application/json; charset=utf-8")
    expected = answer_report(ctx, Report.model_validate(report("p1", seq=1, applied=1)))  # the same seq again
    assert status == 200 and route.calls == []
    got, want = json.loads(answer), json.loads(expected)
    # (the same place in the interval, told a moment apart)
    assert got.pop("nextReportInSeconds") == pytest.approx(want.pop("nextReportInSeconds"), abs=0.5)
    assert got == {**want, "accepted": True, "reason": None}
    assert json.loads(expected)["accepted"] is False   # the route's path too ignores a repeated seq


@pytest.mark.parametrize(("body", "content_type"), [
    (json.dumps({**report("p1"), "extra": 1}).encode(), b"application/json"),    # the route says what is wrong
    (json.dumps(report("p1", seq=-1)).encode(), b"application/json"),
    (b'{"participant": ', b"application/json"),
    (b"", b"application/json"),
    (json.dumps(report("p1")).encode(), b"text/plain"),                         # the route decides what to do
    (json.dumps(report("p1")).encode(), None),
])
def test_anything_else_reaches_the_route_with_its_body_and_stores_nothing(ctx: Context, body: bytes,
                                                                          content_type: bytes | None) -> None:
    route = Route()
    status, _ = call(ParticipantFastPath(route, ctx), body, content_type=content_type, chunks=2)
    assert status == 299 and [b for _, b in route.calls] == [body]
    assert views.participants(ctx.live, 1).participants == []


@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/report"), ("POST", "/v1/goodbye"),
                                              ("POST", "/v1/report/")])
def test_other_requests_pass_through(ctx: Context, method: str, path: str) -> None:
    route = Route()
    body = json.dumps(report("p1")).encode()
    assert call(ParticipantFastPath(route, ctx), body, method=method, path=path)[0] == 299
    assert [(s["path"], b) for s, b in route.calls] == [(path, body)]


def test_the_policy_document_is_rendered_once_a_version_and_the_answer_is_byte_for_byte_the_same(ctx: Context) -> None:
    from controlplane.api_participant import report_response
    from controlplane.principals import TENANT
    from controlplane.store import AuditInfo

    now = time.time()
    ctx.live, twin = LiveState(1.0, lambda: now), LiveState(1.0, lambda: now)   # (so both tell the same places)

    def plain(pid: str, seq: int) -> bytes:   # the answer rendered whole, as before the document was kept rendered
        body = Report.model_validate(report(pid, seq=seq, applied=0))
        return report_response(twin, ctx.policies(), ctx.pace.told_s, body).model_dump_json().encode()

    first = answer_report(ctx, Report.model_validate(report("p1", seq=1, applied=0)))
    assert first == plain("p1", 1)
    rendered = ctx._rendered
    assert answer_report(ctx, Report.model_validate(report("p2", seq=1, applied=0))) == plain("p2", 1)
    assert ctx._rendered is rendered                          # the same document: not rendered again
    ctx.store.change(TENANT, "acme", {"adminRoles": ["ana"], "allowedClusters": []}, AuditInfo("t", "PUT", "/x"))
    moved = answer_report(ctx, Report.model_validate(report("p3", seq=1, applied=0)))
    assert moved == plain("p3", 1) and json.loads(moved)["policies"]["version"] == 2   # a new version: rendered anew
    assert ctx._rendered is not rendered
    applied = answer_report(ctx, Report.model_validate(report("p4", seq=1, applied=2)))
    assert json.loads(applied)["policies"] is None                # the participant has it: none sent


# ---------------------------------------------------------------- reports their senders gave up on


def test_a_report_that_waited_longer_than_its_sender_waits_is_not_worked_on_while_the_loop_is_behind(
        ctx: Context) -> None:
    """Its sender has given the round up and backs off: 503, nothing stored, the route not called."""
    route = Route()
    ctx.lag.observe(0.6)   # the loop 0.6 s behind: reports queue
    old = json.dumps(report("p1", sent_at=time.time() - 3.0)).encode()   # sent every 1 s: given up after 2 s
    status, answer = call(ParticipantFastPath(route, ctx), old)
    assert status == 503 and route.calls == [] and ctx.given_up == 1
    assert json.loads(answer)["reason"].startswith("the report waited 3.0 s for the control plane, longer than its "
                                                   "sender waits (2 s): not worked on")
    assert views.participants(ctx.live, 1).participants == []
    # one still waited for is worked on
    status, answer = call(ParticipantFastPath(route, ctx), json.dumps(report("p1", sent_at=time.time() - 1.0)).encode())
    assert status == 200 and ReportResponse.model_validate_json(answer).accepted


def test_a_report_that_waited_longer_than_its_sender_waits_is_not_worked_on_while_the_core_is_full(
        ctx: Context) -> None:
    """The wake-ups on time, the core full: reports wait to be accepted, where the loop's lag does not see them."""
    route = Route()
    ctx.lag.observe(0.01)
    ctx.lag.busy_share = 0.97
    status, answer = call(ParticipantFastPath(route, ctx),
                          json.dumps(report("p1", sent_at=time.time() - 3.0)).encode())
    assert status == 503 and route.calls == [] and ctx.given_up == 1
    assert views.participants(ctx.live, 1).participants == []


def test_an_old_report_while_the_loop_keeps_up_is_a_skewed_clock_and_is_answered_as_before(ctx: Context) -> None:
    route = Route()
    for lag_s, busy_share in ((0.002, 0.1), (0.4, 0.85)):   # on time, or behind by less than any sender waits
        ctx.lag.observe(lag_s)
        ctx.lag.busy_share = busy_share
        status, answer = call(ParticipantFastPath(route, ctx),
                              json.dumps(report("p1", sent_at=time.time() - 3.0)).encode())
        parsed = ReportResponse.model_validate_json(answer)
        assert status == 200 and not parsed.accepted and "more than 2 report intervals" in (parsed.reason or "")
    assert ctx.given_up == 0


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"participant":{"participant_id":"p"},"seq":1,"sent_at":990,"interval_s":1}', (10.0, 2.0)),
    (b'{"seq":1,"sent_at": 994.0,"interval_s": 10}', (6.0, 5.0)),      # two intervals, at most 5 s
    (b'{"seq":1,"sent_at":999.9,"interval_s":0.1}', None),             # at least 0.5 s: not given up
    (b'{"seq":1,"sent_at":999,"interval_s":1}', None),                 # waited 1 s of 2
    (b'{"seq":1,"interval_s":1}', None),                               # not said: parsed and answered as ever
    (b'{"seq":1,"sent_at":"990","interval_s":1}', None),
    (b'{"seq":1,"sent_at":9.9.9,"interval_s":1}', None),
    (b'{"participant":{"participant_id":"a\\"sent_at\\":1"},"sent_at":999.5,"interval_s":1}', None),
])
def test_how_long_a_report_waited_is_read_from_its_head_without_parsing_it(
        body: bytes, expected: tuple[float, float] | None) -> None:
    got = given_up_s(body, 1000.0)
    assert got == (pytest.approx(expected[0]), expected[1]) if expected is not None else got is None


def test_the_answer_goes_out_before_the_history_records_the_report(ctx: Context,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The history's part of a report (23 of 80 ms at 5,000 limiters) is not waited for: it runs once the answer's
    body is sent, before the call returns."""
    from controlplane.history import History

    events: list[Any] = []
    record = History.record
    monkeypatch.setattr(History, "record", lambda self, *a: (events.append("recorded"), record(self, *a))[1])
    counters = [{"level": "topic", "name": "t/n/x", "kind": "publish", "admitted_msgs_total": 10}]
    exchange(ParticipantFastPath(Route(), ctx), json.dumps(report("p1", counters=counters)).encode(), sent=events)
    assert [e if isinstance(e, str) else e["type"] for e in events] == [
        "http.response.start", "http.response.body", "recorded"]
    assert [s["name"] for s in ctx.live.history()["series"]] == ["t/n/x"]


@pytest.mark.parametrize(("accept", "gzipped"), [(b"gzip, deflate", True), (None, False)])
def test_a_long_answer_is_gzipped_for_a_client_that_accepts_it_as_the_routes_answers_are(
        ctx: Context, accept: bytes | None, gzipped: bool) -> None:
    """The fast path answers in front of FastAPI's gzip middleware (controlplane.app), so it compresses its own
    (here the policy document and twenty limits' usage map)."""
    import gzip as gz

    body = json.dumps(report("p1", applied=0, usage=[usage(f"rg{i}", 5) for i in range(20)])).encode()
    sent = exchange(ParticipantFastPath(Route(), ctx), body,
                    headers=((b"accept-encoding", accept),) if accept else ())
    head = dict(sent[0]["headers"])
    body = sent[1]["body"]
    assert int(head[b"content-length"]) == len(body)
    assert (head.get(b"content-encoding") == b"gzip") is gzipped
    plain = gz.decompress(body) if gzipped else body
    assert len(plain) >= 1024 and ReportResponse.model_validate_json(plain).policies is not None
