"""Auth on every endpoint, enumerated from the served OpenAPI document so a new endpoint cannot escape."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from .conftest import ADMIN, PARTICIPANT, ControlPlane

pytestmark = pytest.mark.integration
MUTATING = {"post", "put", "delete", "patch"}
SAMPLE = {"name": "dispatchThrottlingRateInMsg", "value": "1", "user": "u", "clientId": "c"}


def operations(cp: ControlPlane) -> list[tuple[str, str, dict[str, Any]]]:
    doc = httpx.get(cp.url + "/openapi.json").json()
    out = []
    for template, methods in doc["paths"].items():
        path = re.sub(r"\{(\w+)\}", lambda m: SAMPLE.get(m.group(1), "x"), template)
        for method, op in methods.items():
            out.append((method, path, op))
    assert len(out) >= 50, "the OpenAPI document lists fewer operations than the API has"
    return out


def call(c: httpx.Client, method: str, path: str, op: dict[str, Any]) -> httpx.Response:
    return c.request(method.upper(), path, json={} if "requestBody" in op else None)


def test_every_endpoint_needs_the_right_token(start_cp: Any) -> None:
    cp: ControlPlane = start_cp()
    anonymous, participant, wrong, admin = (cp.client(None), cp.client(PARTICIPANT), cp.client("not-a-token" * 3),
                                           cp.client(ADMIN))
    ops = operations(cp)
    mutating = [(m, p, op) for m, p, op in ops if m in MUTATING]
    assert len(mutating) >= 30
    for method, path, op in ops:
        participant_ok = path in ("/v1/report", "/v1/goodbye")
        if op["x-required-role"] == "open":
            assert call(anonymous, method, path, op).status_code == 200, path
            continue
        r = call(anonymous, method, path, op)
        assert r.status_code == 401, (method, path, r.status_code)
        assert r.headers["www-authenticate"] == "Bearer" and "needs a token" in r.json()["reason"]
        r = call(wrong, method, path, op)
        assert r.status_code == 403 and "unknown token" in r.json()["reason"], (method, path, r.status_code)
        r = call(participant, method, path, op)
        if method in MUTATING and not participant_ok:
            assert r.status_code == 403, (method, path, r.status_code)
            assert "needs the admin token" in r.json()["reason"]
        else:
            assert r.status_code not in (401, 403), (method, path, r.status_code)
    # nothing a refused call did shows up: the version never moved and the audit log is empty
    assert admin.get("/admin/v2/audit").json()["total"] == 0
    assert admin.get("/healthz").json()["policyVersion"] == 1
    for method, path, op in mutating:
        r = call(admin, method, path, op)
        assert r.status_code not in (401, 403), (method, path, r.status_code)


def test_open_reads(start_cp: Any) -> None:
    cp: ControlPlane = start_cp(args=["--open-reads"])
    anonymous = cp.client(None)
    assert anonymous.get("/admin/v2/resourcegroups").status_code == 200
    assert anonymous.get("/v1/state/participants").status_code == 200
    assert anonymous.get("/admin/v2/audit").status_code == 200
    assert anonymous.put("/admin/v2/resourcegroups/x", json={}).status_code == 401
    assert anonymous.post("/v1/report", json={}).status_code == 401
    assert cp.client("unknown-token-0123456789").put("/admin/v2/resourcegroups/x", json={}).status_code == 403
    assert anonymous.get("/admin/v2/resourcegroups", headers={"Authorization": "Basic eDp5"}).status_code == 200
    assert cp.client(PARTICIPANT).delete("/admin/v2/resourcegroups/x").status_code == 403


def test_tokens_never_logged(start_cp: Any) -> None:
    cp: ControlPlane = start_cp(args=["--log-level", "debug"])
    cp.client(ADMIN).put("/admin/v2/resourcegroups/logged", json={})
    cp.client(PARTICIPANT).get("/v1/state/buckets")
    cp.client("Bearer-guess-0123456789").get("/v1/state/buckets")
    cp.stop()
    log = cp.stderr()
    assert "/admin/v2/resourcegroups/logged" in log        # the request was logged ...
    for secret in (ADMIN, PARTICIPANT, "Bearer-guess-0123456789"):
        assert secret not in log                          # ... without any token
