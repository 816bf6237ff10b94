"""The ``/v1/state/*`` views built a step at a time and sent a piece at a time on the event loop (the views'
``*_steps``, ``controlplane.json_pieces``, ``controlplane.renders``): the same answers as the typed views, the loop
free between pieces, and a costly render handed out again, with its age, while rendering anew would take more than
the share -- every key in its turn, none starved."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane import views
from controlplane.api_state import view_pieces
from controlplane.app import create_app
from controlplane.auth import Tokens
from controlplane.config import Settings
from controlplane.grant_tables import StateStoreUnavailable
from controlplane.json_pieces import json_pieces
from controlplane.renders import FORGET_AFTER_S, Renders, streamed

from .conftest import ADMIN, PARTICIPANT, report, usage

pytestmark = pytest.mark.unit
PARTICIPANTS, LIMITS = 12, 150   # 1,800 entries per view: several pauses while building and while encoding


def bucket(name: str, tokens: float) -> dict[str, Any]:
    return {"level": "topic", "name": name, "kind": "publish", "bytes": None,
            "msgs": {"tokens": tokens, "rate": 100.0, "capacity": 100.0, "period_s": 1.0}}


def busy_report(i: int, seq: int, at: float) -> dict[str, Any]:
    names = [f"acme/web/t{k}" for k in range(LIMITS)]
    counters = [{"level": "topic", "name": n, "kind": "publish", "throttled_count": i,
                 "throttle_time_seconds_total": 0.0, "admitted_msgs_total": 100.0 * seq * (i + 1),
                 "admitted_bytes_total": 0.0} for n in names]
    return report(f"w{i:02d}", seq, sent_at=at,
                  usage=[usage(n, 10.0 + i, 20.0 + i, level="topic") for n in names] + [usage("rg0", 5.0 + i)],
                  buckets=[bucket(n, tokens=i - 3) for n in names], counters=counters,
                  queues=[{"level": "topic", "name": names[0], "length": i, "entries": []}])


def test_json_in_pieces_parses_to_the_document_and_pauses_wherever_the_items_are_nested() -> None:
    doc = {"policyVersion": 3, "learning": False, "empty": [], "adaptive": {"rate": 1.5},
           "limits": [{"key": f"k{i}", "adaptive": None, "rates": [math.inf, math.nan, 1.0],
                       "participants": [{"participantId": f"p{j}", "share": "unlimited"} for j in range(i % 9)]}
                      for i in range(60)],
           "nested": [[1, [2, []]], {"a": [{"b": []}]}]}
    want = json.loads(json.dumps(doc).replace("Infinity", "null").replace("NaN", "null"))
    for per in (1, 2, 7, 1000):
        got = list(json_pieces(doc, per))
        assert json.loads(b"".join(p for p in got if p is not None)) == want
        assert b"" not in got and got[-1] is not None
        if per == 7:   # 240 participants of 60 limits, 60 limits, 3 x 60 rates and the rest: a pause every 7
            assert sum(p is None for p in got) >= (240 + 60 + 180) // 7
    with pytest.raises(ValueError, match="items_per_piece must be >= 1, got 0"):
        list(json_pieces(doc, 0))


class Cost:
    """A render's CPU on a fake clock: each render takes ``cost_s[key]``."""

    def __init__(self) -> None:
        self.cpu_s, self.cost_s, self.renders = 0.0, {"a": 0.2, "b": 0.3, "cheap": 0.01}, []

    def render(self, key: str, text: bytes) -> Iterator[bytes | None]:
        self.renders.append(key)
        self.cpu_s += self.cost_s[key] / 2
        yield None
        self.cpu_s += self.cost_s[key] / 2
        yield text


def read(renders: Renders, cost: Cost, key: str, text: bytes) -> tuple[bytes, float | None]:
    async def body() -> tuple[bytes, float | None]:
        answer = await renders.answer(key, lambda: cost.render(key, text))
        return b"".join([chunk async for chunk in answer]), answer.age_s
    return asyncio.run(body())


def test_costly_keys_share_one_budget_in_turn_and_a_cheap_one_is_always_fresh() -> None:
    now, cost = [0.0], Cost()
    renders = Renders(share=0.1, clock=lambda: now[0], cpu_clock=lambda: cost.cpu_s)
    assert read(renders, cost, "a", b"a1") == (b"a1", None)
    assert read(renders, cost, "b", b"b1") == (b"b1", None)
    assert renders.last("a").cpu_s == pytest.approx(0.2) and renders.last("b").cpu_s == pytest.approx(0.3)
    # a page reads a then b every 2 s: (0.2 + 0.3) / 0.1 = 5 s between a key's renders, whichever is read first
    fresh: dict[str, list[float]] = {"a": [0.0], "b": [0.0]}
    latest = {"a": b"a1", "b": b"b1"}
    for tick in range(1, 16):
        now[0] = 2.0 * tick
        for key in ("a", "b"):
            text, age_s = read(renders, cost, key, f"{key}{tick}".encode())
            if age_s is None:
                fresh[key].append(now[0])
                latest[key] = text
            else:   # handed out again as it was, and how old it is
                assert text == latest[key] and age_s == pytest.approx(now[0] - fresh[key][-1])
    for key in ("a", "b"):
        gaps = [b - a for a, b in zip(fresh[key], fresh[key][1:], strict=False)]
        assert gaps and min(gaps) >= 5.0 and max(gaps) <= 6.0, (key, fresh[key])   # neither starved
    spent_s = sum(cost.cost_s[k] for k in cost.renders)
    assert spent_s / now[0] <= 0.1 + 0.5 / now[0]   # the share, give or take the first renders
    assert read(renders, cost, "cheap", b"c1") == (b"c1", None)
    assert read(renders, cost, "cheap", b"c2") == (b"c2", None)
    now[0] += 1.5
    reused = asyncio.run(renders.answer("a", lambda: cost.render("a", b"-")))
    assert reused.age_s >= 1.5 and streamed(reused, "text/plain").headers["age"] == str(int(reused.age_s))
    fresh_answer = asyncio.run(renders.answer("cheap", lambda: cost.render("cheap", b"-")))
    assert fresh_answer.age_s is None and "age" not in streamed(fresh_answer, "text/plain").headers


def test_a_key_nobody_reads_is_forgotten_and_no_longer_counts() -> None:
    now, cost = [0.0], Cost()
    renders = Renders(share=0.1, clock=lambda: now[0], cpu_clock=lambda: cost.cpu_s)
    read(renders, cost, "a", b"a1")
    read(renders, cost, "b", b"b1")
    now[0] = FORGET_AFTER_S + 1.0
    read(renders, cost, "a", b"a2")   # b unread for longer than FORGET_AFTER_S: gone
    assert renders.last("b") is None
    now[0] += 0.2 / 0.1 - 0.01
    assert read(renders, cost, "a", b"a3")[0] == b"a2"
    now[0] += 0.02
    assert read(renders, cost, "a", b"a4") == (b"a4", None)   # every 2 s: a's own cost alone counts now


async def _tick(counter: list[int]) -> None:
    while True:
        counter[0] += 1
        await asyncio.sleep(0)


def test_every_state_view_answers_as_its_typed_view_and_the_big_ones_let_the_loop_run_at_every_pause(
        tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, report_interval_s=1.0), Tokens(admin=ADMIN, participant=PARTICIPANT))
    ctx = app.state.ctx

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://cp") as c:
                admin = {"Authorization": f"Bearer {ADMIN}"}
                (await c.put("/admin/v2/resourcegroups/rg0", json={"publishRateInMsgs": 500}, headers=admin)
                 ).raise_for_status()
                at = time.time()
                for seq, sent in ((1, at - 0.6), (2, at)):
                    for i in range(PARTICIPANTS):
                        r = await c.post("/v1/report", json=busy_report(i, seq, sent),
                                         headers={"Authorization": f"Bearer {PARTICIPANT}"})
                        assert r.status_code == 200, r.text
                out = {}
                for path in ("participants", "buckets", "queues", "resourcegroups", "shared", "history"):
                    got = await c.get(f"/v1/state/{path}", headers=admin)
                    assert got.status_code == 200 and got.headers["content-type"] == "application/json", got.text
                    out[path] = got.json()
                totals = (await c.get("/v1/state/buckets", params={"rows": "false"}, headers=admin)).json()
                out["bucket totals"] = totals
                out["shared summary"] = (await c.get("/v1/state/shared", params={"participants": "false"},
                                                     headers=admin)).json()
                two = ["topic:publish:acme/web/t7", "resource_group:publish:rg0", "topic:publish:nowhere"]
                out["shared of two"] = (await c.get("/v1/state/shared", params=[("key", k) for k in two],
                                                    headers=admin)).json()
                ps = ctx.policies()
                for path, steps in (("buckets", lambda: views.bucket_steps(ctx.live)),
                                    ("shared", lambda: views.shared_steps(ctx.live, ps, ctx.grants, False)),
                                    ("history", lambda: ctx.live.history_steps())):
                    pauses = sum(piece is None for piece in view_pieces(steps()))
                    ticks = [0]
                    ticker = asyncio.create_task(_tick(ticks))
                    await asyncio.sleep(0)
                    answer = await Renders(share=1.0).answer(path, lambda steps=steps: view_pieces(steps()))
                    text = b"".join([chunk async for chunk in answer])
                    ticker.cancel()
                    assert json.loads(text) == out[path] and pauses >= 2, path
                    assert ticks[0] > pauses, (path, ticks[0], pauses)   # the other task ran at every pause
                typed = {"participants": views.participants(ctx.live, ps.version), "buckets": views.buckets(ctx.live),
                         "queues": views.queues(ctx.live),
                         "resourcegroups": views.resource_groups(ctx.live, ps, ctx.grants),
                         "shared": views.shared(ctx.live, ps, ctx.grants, ctx.grants.learning)}
                return out, typed

    answers, typed = asyncio.run(scenario())
    for path, view in typed.items():
        doc, want = answers[path], view.model_dump(mode="json")
        parsed = type(view).model_validate(doc).model_dump(mode="json")
        if path == "participants":   # (seconds since last seen: the moment each was read)
            for row in doc["participants"] + want["participants"] + parsed["participants"]:
                assert row.pop("secondsSinceLastSeen") < 5
        assert parsed == want and doc == want, path   # every field the model has, none it has not
    assert len(answers["buckets"]["buckets"]) == PARTICIPANTS * LIMITS
    assert [t["participants"] for t in answers["buckets"]["totals"]] == [PARTICIPANTS] * LIMITS
    # the totals alone (what the dashboard's pages read): no row each, the same totals, with the limited rates
    # per second summed (100 a participant)
    assert answers["bucket totals"] == {"buckets": [], "totals": answers["buckets"]["totals"]}
    assert {t["msgs"]["ratePerSecond"] for t in answers["bucket totals"]["totals"]} == {100.0 * PARTICIPANTS}
    assert {t["bytes"]["ratePerSecond"] for t in answers["bucket totals"]["totals"]} == {None}
    shared = {limit["key"]: limit for limit in answers["shared"]["limits"]}
    assert len(shared) == LIMITS + 1 and len(shared["topic:publish:acme/web/t7"]["participants"]) == PARTICIPANTS
    assert shared["resource_group:publish:rg0"]["limitMsgsPerSecond"] == 500
    # the summary lists nobody but counts them; the limits asked for by key come whole
    summary = {limit["key"]: limit for limit in answers["shared summary"]["limits"]}
    assert summary.keys() == shared.keys()
    for key, limit in shared.items():
        assert limit["participantCount"] == len(limit["participants"])
        assert summary[key] == {**limit, "participants": []}, key
    assert answers["shared of two"]["limits"] == [shared["resource_group:publish:rg0"],
                                                  shared["topic:publish:acme/web/t7"]]
    history = answers["history"]
    assert {s["name"] for s in history["series"]} == {f"acme/web/t{k}" for k in range(LIMITS)}


def test_a_view_that_fails_while_it_is_built_is_answered_as_the_failure_not_as_a_200_cut_short(
        tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, report_interval_s=1.0), Tokens(admin=ADMIN, participant=PARTICIPANT))

    def unreachable() -> list[str]:
        raise StateStoreUnavailable("the shared state store redis://127.0.0.1:1 cannot be used; try again")

    async def scenario() -> httpx.Response:
        async with app.router.lifespan_context(app):
            app.state.ctx.grants.limit_keys = unreachable
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://cp") as c:
                return await c.get("/v1/state/shared", headers={"Authorization": f"Bearer {ADMIN}"})

    got = asyncio.run(scenario())
    assert got.status_code == 503 and "cannot be used" in got.json()["reason"], got.text


def test_the_views_query_parameters_refuse_what_they_do_not_take_and_say_what_is_allowed(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path, report_interval_s=1.0), Tokens(admin=ADMIN, participant=PARTICIPANT))

    async def scenario() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://cp") as c:
            admin = {"Authorization": f"Bearer {ADMIN}"}
            return [await c.get("/v1/state/shared", params=[("key", f"topic:publish:t{i}") for i in range(n)],
                                headers=admin) for n in (100, 101)] + [
                await c.get("/v1/state/shared", params={"participants": "maybe"}, headers=admin),
                await c.get("/v1/state/buckets", params={"rows": "some"}, headers=admin)]

    hundred, too_many, maybe, some = asyncio.run(scenario())
    assert hundred.status_code == 200 and hundred.json()["limits"] == []   # keys nobody uses: none shown
    assert too_many.status_code == 422 and "key: List should have at most 100 items" in too_many.json()["reason"]
    assert maybe.status_code == 422 and "participants: Input should be a valid boolean" in maybe.json()["reason"]
    assert some.status_code == 422 and "rows: Input should be a valid boolean" in some.json()["reason"]
