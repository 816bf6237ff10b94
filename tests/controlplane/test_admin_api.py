"""The admin API against a real control plane: every endpoint, its success and error codes, the audit log."""

from __future__ import annotations

import gzip
from typing import Any

import httpx
import pytest

from .conftest import ControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.parallel]
V2 = "/admin/v2"


@pytest.fixture(scope="module")
def admin(shared_cp: ControlPlane) -> httpx.Client:
    return shared_cp.client()


def version(c: httpx.Client) -> int:
    return c.get("/healthz").json()["policyVersion"]


def reason(r: httpx.Response) -> str:
    body = r.json()
    assert set(body) == {"reason"}, body
    return body["reason"]


def test_healthz(shared_cp: ControlPlane) -> None:
    r = httpx.get(shared_cp.url + "/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["version"] and body["schemaVersion"] == 2 and body["policyVersion"] >= 1


def test_resource_group_lifecycle(admin: httpx.Client) -> None:
    v0 = version(admin)
    assert admin.get(f"{V2}/resourcegroups/rg-life").status_code == 404
    r = admin.put(f"{V2}/resourcegroups/rg-life", json={"publishRateInMsgs": 100, "dispatchRateInBytes": 5e6})
    assert r.status_code == 201 and int(r.headers["X-Policy-Version"]) == v0 + 1
    assert r.json() == {"publishRateInMsgs": 100, "publishRateInBytes": -1, "dispatchRateInMsgs": -1,
                        "dispatchRateInBytes": 5e6}
    assert admin.get(f"{V2}/resourcegroups/rg-life").json()["publishRateInMsgs"] == 100
    r = admin.put(f"{V2}/resourcegroups/rg-life", json={"publishRateInMsgs": 200})
    assert r.status_code == 204 and r.content == b"" and int(r.headers["X-Policy-Version"]) == v0 + 2
    assert admin.get(f"{V2}/resourcegroups/rg-life").json() == {   # only the field sent changed
        "publishRateInMsgs": 200, "publishRateInBytes": -1, "dispatchRateInMsgs": -1, "dispatchRateInBytes": 5e6}
    assert "rg-life" in admin.get(f"{V2}/resourcegroups").json()
    assert admin.delete(f"{V2}/resourcegroups/rg-life").status_code == 204
    r = admin.delete(f"{V2}/resourcegroups/rg-life")
    assert r.status_code == 404 and "does not exist" in reason(r)
    assert "rg-life" not in admin.get(f"{V2}/resourcegroups").json()
    assert version(admin) == v0 + 3


@pytest.mark.parametrize("scope,path", [("namespace", "namespaces/acme/web"), ("tenant", "tenants/acme")])
def test_attach_detach(admin: httpx.Client, scope: str, path: str) -> None:
    group = f"rg-{scope}"
    r = admin.post(f"{V2}/{path}/resourcegroup/{group}")
    assert r.status_code == 412 and "does not exist" in reason(r) and "PUT /admin/v2/resourcegroups" in reason(r)
    assert admin.put(f"{V2}/resourcegroups/{group}", json={}).status_code == 201
    r = admin.get(f"{V2}/{path}/resourcegroup")
    assert r.status_code == 204 and r.content == b""
    assert admin.post(f"{V2}/{path}/resourcegroup/{group}").status_code == 204
    r = admin.get(f"{V2}/{path}/resourcegroup")
    assert r.text == group and r.headers["content-type"].startswith("text/plain")     # the bare name
    r = admin.delete(f"{V2}/resourcegroups/{group}")
    assert r.status_code == 412 and f"{scope} " in reason(r) and "detach it first" in reason(r)
    assert admin.get(f"{V2}/resourcegroups/{group}").status_code == 200
    assert admin.delete(f"{V2}/{path}/resourcegroup").status_code == 204
    v0 = version(admin)
    assert admin.delete(f"{V2}/{path}/resourcegroup").status_code == 204   # none attached: succeeds, as a change
    assert version(admin) == v0 + 1
    assert admin.put(f"{V2}/{path}/resourcegroup/{group}").status_code == 204   # PUT attaches too
    assert admin.delete(f"{V2}/{path}/resourcegroup").status_code == 204
    assert admin.delete(f"{V2}/resourcegroups/{group}").status_code == 204


POLICIES = [
    ("tenants/acme", "publishRate", {"publishThrottlingRateInMsg": 1000, "publishThrottlingRateInByte": 1e6}),
    ("tenants/acme", "dispatchRate", {"dispatchThrottlingRateInMsg": 10}),
    ("namespaces/acme/web", "publishRate", {"publishThrottlingRateInMsg": 100, "ratePeriodInSecond": 2}),
    ("namespaces/acme/web", "dispatchRate", {"dispatchThrottlingRateInMsg": 50, "relativeToPublishRate": False}),
    ("namespaces/acme/web", "subscriptionDispatchRate", {"dispatchThrottlingRateInByte": 4096}),
    ("persistent/acme/web/clicks", "publishRate", {"publishThrottlingRateInMsg": 10}),
    ("persistent/acme/web/clicks", "dispatchRate", {"dispatchThrottlingRateInMsg": -1}),
    ("persistent/acme/web/clicks", "subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": 0}),
    ("persistent/acme/web/clicks/sub-a", "dispatchRate", {"dispatchThrottlingRateInMsg": 3}),
    ("non-persistent/acme/web/views", "publishRate", {"publishThrottlingRateInByte": 2048}),
]


@pytest.mark.parametrize("path,policy,body", POLICIES)
def test_policies(admin: httpx.Client, path: str, policy: str, body: dict[str, Any]) -> None:
    url = f"{V2}/{path}/{policy}"
    r = admin.get(url)
    assert r.status_code == 204 and r.content == b""                      # not set: no body (Pulsar's null)
    v0 = version(admin)
    assert admin.delete(url).status_code == 204                            # removing what is not set succeeds
    r = admin.post(url, json=body)
    assert r.status_code == 204 and int(r.headers["X-Policy-Version"]) == v0 + 2
    assert "X-Ignored-Fields" not in r.headers
    got = admin.get(url).json()
    assert got.items() >= body.items() and got["ratePeriodInSecond"] == body.get("ratePeriodInSecond", 1)
    r = admin.put(url, json={next(iter(body)): -5})
    assert r.status_code == 422 and "-1 for unlimited" in reason(r)
    assert admin.get(url).json() == got and version(admin) == v0 + 2          # a rejected call changed nothing
    r = admin.post(url, json={**body, "unknownField": 1, "other": {"x": 1}})  # unknown fields: ignored, named
    assert r.status_code == 204 and r.headers["X-Ignored-Fields"] == "other, unknownField"
    assert admin.get(url).json() == got
    assert admin.delete(url).status_code == 204
    assert admin.get(url).status_code == 204


@pytest.mark.parametrize("path", ["namespaces/acme/rel/dispatchRate", "namespaces/acme/rel/subscriptionDispatchRate",
                                  "persistent/acme/rel/t/dispatchRate", "persistent/acme/rel/t/s/dispatchRate",
                                  "tenants/acme-rel/dispatchRate"])
def test_relative_dispatch_rates_are_refused_not_ignored(admin: httpx.Client, path: str) -> None:
    v0 = version(admin)
    r = admin.post(f"{V2}/{path}", json={"dispatchThrottlingRateInMsg": 10, "relativeToPublishRate": True})
    assert r.status_code == 400 and "relativeToPublishRate must be false" in reason(r) and "absolute" in reason(r)
    assert admin.get(f"{V2}/{path}").status_code == 204 and version(admin) == v0


@pytest.mark.parametrize("path", ["persistent/acme/ad/t/publishRate", "namespaces/acme/ad/publishRate",
                                  "tenants/acme-ad/publishRate"])
def test_an_adaptive_publish_rate_is_kept_and_one_that_cannot_hold_is_refused(admin: httpx.Client, path: str) -> None:
    url = f"{V2}/{path}"
    v0 = version(admin)
    r = admin.post(url, json={"publishThrottlingRateInByte": 4096, "adaptive": True})
    assert r.status_code == 412 and "adaptive needs a messages limit" in reason(r)
    r = admin.post(url, json={"publishThrottlingRateInMsg": 100, "adaptive": True, "adaptiveFloorInMsg": 200})
    assert r.status_code == 412 and "adaptiveFloorInMsg (200) must be <= publishThrottlingRateInMsg (100)" in reason(r)
    r = admin.post(url, json={"publishThrottlingRateInMsg": 100, "adaptive": "yes"})
    assert r.status_code == 422
    assert admin.get(url).status_code == 204 and version(admin) == v0       # nothing stored
    body = {"publishThrottlingRateInMsg": 2000, "adaptive": True, "adaptiveFloorInMsg": 50}
    assert admin.post(url, json=body).status_code == 204
    assert admin.get(url).json().items() >= body.items()
    entry = admin.get(f"{V2}/audit", params={"limit": 1}).json()["entries"][0]      # the switch, audited
    assert entry["endpoint"].endswith(path) and entry["newValue"]["adaptive"] is True
    assert admin.delete(url).status_code == 204


def test_effective_limits_precedence(admin: httpx.Client) -> None:
    base = f"{V2}/persistent/eff/ns/t1/effectiveLimits"
    body = admin.get(base).json()
    assert body["topic"] == "eff/ns/t1" and body["publishRate"]["source"] is None
    assert body["publishRate"]["rate"]["unlimited"] is True and body["aggregates"] == []
    admin.post(f"{V2}/brokers/configuration/maxPublishRatePerTopicInMessages/500")
    assert admin.get(base).json()["publishRate"]["source"] == "broker"
    admin.post(f"{V2}/namespaces/eff/ns/publishRate", json={"publishThrottlingRateInMsg": 300})
    got = admin.get(base).json()["publishRate"]
    assert got["source"] == "namespace" and got["rate"]["msgs"] == 300
    admin.post(f"{V2}/persistent/eff/ns/t1/publishRate", json={"publishThrottlingRateInMsg": 7})
    assert admin.get(base).json()["publishRate"]["rate"]["msgs"] == 7
    assert admin.get(f"{V2}/persistent/eff/ns/t2/effectiveLimits").json()["publishRate"]["rate"]["msgs"] == 300
    admin.post(f"{V2}/namespaces/eff/ns/subscriptionDispatchRate", json={"dispatchThrottlingRateInMsg": 20})
    admin.put(f"{V2}/resourcegroups/rg-eff", json={"publishRateInMsgs": 1000})
    admin.post(f"{V2}/tenants/eff/resourcegroup/rg-eff")
    admin.post(f"{V2}/tenants/eff/publishRate", json={"publishThrottlingRateInMsg": 5000})
    body = admin.get(base, params={"subscription": "s1"}).json()
    assert body["subscription"] == "s1"
    assert body["subscriptionDispatchRate"]["source"] == "namespace"
    assert body["dispatchRate"]["source"] is None
    aggs = {(a["level"], a["direction"]): a for a in body["aggregates"]}
    assert aggs[("resource_group", "publish")]["name"] == "rg-eff"
    assert aggs[("resource_group", "publish")]["attachedTo"] == "tenant eff"
    assert aggs[("tenant", "publish")]["rate"]["msgs"] == 5000
    assert body["broker"]["preciseDispatcherFlowControl"] is False
    r = admin.get(base, params={"subscription": "bad\u0001"})
    assert r.status_code == 422
    # a subscription's own dispatch rate, and a topic's own resource group, win over the wider ones
    admin.post(f"{V2}/persistent/eff/ns/t1/s1/dispatchRate", json={"dispatchThrottlingRateInMsg": 4})
    admin.put(f"{V2}/resourcegroups/rg-eff-topic", json={"dispatchRateInMsgs": 9})
    assert admin.post(f"{V2}/persistent/eff/ns/t1/resourceGroup", content=b"rg-eff-topic").status_code == 204
    body = admin.get(base, params={"subscription": "s1"}).json()
    assert body["subscriptionDispatchRate"]["source"] == "subscription"
    assert body["subscriptionDispatchRate"]["rate"]["msgs"] == 4
    aggs = {(a["level"], a["direction"]): a for a in body["aggregates"]}
    assert aggs[("resource_group", "dispatch")]["name"] == "rg-eff-topic"
    assert aggs[("resource_group", "dispatch")]["attachedTo"] == "topic eff/ns/t1"
    assert admin.get(base, params={"subscription": "s2"}).json()["subscriptionDispatchRate"]["source"] == "namespace"
    non_persistent = admin.get(f"{V2}/non-persistent/eff/ns/t1/effectiveLimits", params={"subscription": "s1"})
    assert non_persistent.json() == body                                   # the same topic, either domain
    admin.delete(f"{V2}/brokers/configuration/maxPublishRatePerTopicInMessages")


def test_broker_settings(admin: httpx.Client) -> None:
    names = admin.get(f"{V2}/brokers/configuration").json()
    assert "managedLedgerOffloadBrokerFlowPermitsPerSecond" in names and len(names) == 15
    runtime = admin.get(f"{V2}/brokers/configuration/runtime").json()
    assert runtime["dispatchThrottlingOnNonBacklogConsumerEnabled"] is True and set(runtime) == set(names)
    assert "dispatchThrottlingRateInMsg" not in admin.get(f"{V2}/brokers/configuration/values").json()
    assert admin.post(f"{V2}/brokers/configuration/dispatchThrottlingRateInMsg/250").status_code == 204
    assert admin.post(f"{V2}/brokers/configuration/managedLedgerOffloadBrokerFlowPermitsPerSecond/1e6"
                      ).status_code == 204
    assert admin.post(f"{V2}/brokers/configuration/preciseDispatcherFlowControl/TRUE").status_code == 204
    values = admin.get(f"{V2}/brokers/configuration/values").json()   # the overridden ones only
    assert values["dispatchThrottlingRateInMsg"] == 250 and values["preciseDispatcherFlowControl"] is True
    assert values["managedLedgerOffloadBrokerFlowPermitsPerSecond"] == 1e6
    assert "dispatchThrottlingOnNonBacklogConsumerEnabled" not in values
    assert admin.get(f"{V2}/brokers/configuration/runtime").json()["dispatchThrottlingRateInMsg"] == 250
    r = admin.post(f"{V2}/brokers/configuration/dispatchThrottlingOnBatchMessageEnabled/true")
    assert r.status_code == 409 and "mutually exclusive" in reason(r)
    v0 = version(admin)
    for bad in ("-2", "nan", "inf", "abc"):
        r = admin.post(f"{V2}/brokers/configuration/dispatchThrottlingRateInMsg/{bad}")
        assert r.status_code == 412 and "dispatchThrottlingRateInMsg" in reason(r), bad
    r = admin.post(f"{V2}/brokers/configuration/preciseDispatcherFlowControl/yes")
    assert r.status_code == 412 and "'true' or 'false'" in reason(r)
    r = admin.post(f"{V2}/brokers/configuration/noSuchSetting/1")
    assert r.status_code == 412 and "dispatchThrottlingRatePerTopicInMsg" in reason(r)
    assert admin.delete(f"{V2}/brokers/configuration/noSuchSetting").status_code == 412
    assert version(admin) == v0
    for name in ("dispatchThrottlingRateInMsg", "preciseDispatcherFlowControl",
                 "managedLedgerOffloadBrokerFlowPermitsPerSecond"):
        assert admin.delete(f"{V2}/brokers/configuration/{name}").status_code == 204
    assert admin.delete(f"{V2}/brokers/configuration/dispatchThrottlingRateInMsg").status_code == 204  # not overridden
    assert version(admin) == v0 + 4
    assert admin.get(f"{V2}/brokers/configuration/runtime").json()["dispatchThrottlingRateInMsg"] == 0
    assert "dispatchThrottlingRateInMsg" not in admin.get(f"{V2}/brokers/configuration/values").json()


def test_mutation_quotas(admin: httpx.Client) -> None:
    url = f"{V2}/quotas/mutations/alice/%3Cdefault%3E"
    assert admin.get(url).status_code == 404
    r = admin.put(url, json={"quotaPerSecond": 10, "samples": 5, "strict": False})
    assert r.status_code == 201 and r.json() == {"quotaPerSecond": 10, "windowSeconds": 1, "samples": 5,
                                                 "strict": False}
    assert admin.put(url, json={"quotaPerSecond": 20}).status_code == 204
    assert admin.get(url).json() == {"quotaPerSecond": 20, "windowSeconds": 1, "samples": 11, "strict": True}
    listed = admin.get(f"{V2}/quotas/mutations").json()
    assert {"user": "alice", "clientId": "<default>", "quotaPerSecond": 20, "windowSeconds": 1, "samples": 11,
            "strict": True} in listed
    assert admin.put(url, json={"quotaPerSecond": 1, "strict": "no"}).status_code == 422
    assert admin.put(url, json={"samples": 3}).status_code == 422       # quotaPerSecond is required
    assert admin.put(f"{V2}/quotas/mutations/bad%20user/c", json={"quotaPerSecond": 1}).status_code == 422
    assert admin.delete(url).status_code == 204
    assert admin.delete(url).status_code == 404


@pytest.mark.parametrize("path", [
    "resourcegroups/bad%20name", "resourcegroups/" + "x" * 257, "namespaces/acme/bad$ns/publishRate",
    "tenants/%C3%A9t%C3%A9/resourcegroup", "persistent/a/b/c%2Fd/publishRate",
])
def test_invalid_names(admin: httpx.Client, path: str) -> None:
    r = admin.get(f"{V2}/{path}")
    assert r.status_code in (404, 422)
    if r.status_code == 422:
        assert "letters, digits" in reason(r)
    else:
        assert "no such endpoint" in reason(r)


def test_bodies_validation(admin: httpx.Client, shared_cp: ControlPlane) -> None:
    v0 = version(admin)
    url = f"{V2}/resourcegroups/rg-body"
    r = admin.put(url, content=b'{"publishRateInMsgs": 1', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in reason(r)
    r = admin.put(url, content=b'{"publishRateInMsgs": 1}', headers={"content-type": "text/plain"})
    assert r.status_code == 422 and "application/json" in reason(r)
    r = admin.put(url, json=[1, 2])
    assert r.status_code == 422
    r = admin.put(url, content=b'{"a":' * 40 + b"1" + b"}" * 40, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "nested deeper than 32" in reason(r)
    big = b'{"publishRateInMsgs": 1, "pad": "' + b"x" * (1024 * 1024) + b'"}'
    r = admin.put(url, content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "at most 1048576" in reason(r)

    def chunks() -> Any:
        yield b'{"pad": "'
        for _ in range(20):
            yield b"x" * 65536
        yield b'"}'
    r = admin.put(url, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger than" in reason(r)
    assert admin.get(url).status_code == 404 and version(admin) == v0


def test_gzip_bodies_are_inflated_within_a_limit_and_large_answers_come_compressed(admin: httpx.Client) -> None:
    v0 = version(admin)
    url = f"{V2}/resourcegroups/rg-gzip"
    gz = {"content-type": "application/json", "content-encoding": "gzip"}
    two_members = gzip.compress(b'{"publishRateInMsgs": ') + gzip.compress(b'7}')   # (RFC 1952 allows several)
    r = admin.put(url, content=two_members, headers=gz)
    assert r.status_code == 201 and admin.get(url).json()["publishRateInMsgs"] == 7
    bomb = gzip.compress(b'{"pad": "' + b"x" * (40 * 1024 * 1024) + b'"}')   # 40 KB that inflate to 40 MB
    r = admin.put(url, content=bomb, headers=gz)
    assert r.status_code == 413 and "inflates to larger than" in reason(r)
    r = admin.put(url, content=b'{"publishRateInMsgs": 8}', headers=gz)
    assert r.status_code == 400 and "not valid gzip" in reason(r)
    r = admin.put(url, content=gzip.compress(b'{"publishRateInMsgs": 8}')[:-6], headers=gz)
    assert r.status_code == 400 and "ends before" in reason(r)
    r = admin.put(url, content=b'{"publishRateInMsgs": 8}', headers={**gz, "content-encoding": "br"})
    assert r.status_code == 415 and "identity" in reason(r) and "gzip" in reason(r)
    assert admin.get(url).json()["publishRateInMsgs"] == 7 and version(admin) == v0 + 1   # refusals stored nothing
    big = admin.get("/openapi.json", headers={"accept-encoding": "gzip"})
    assert big.headers["content-encoding"] == "gzip" and big.json()["paths"]          # (httpx inflates it)
    small = admin.get("/healthz", headers={"accept-encoding": "gzip"})
    assert "content-encoding" not in small.headers
    assert admin.delete(url).status_code == 204


def test_unknown_routes_and_methods_answer_json(admin: httpx.Client) -> None:
    r = admin.get("/admin/v2/nothing-here")
    assert r.status_code == 404 and "no such endpoint" in reason(r)
    r = admin.patch(f"{V2}/resourcegroups/x", json={})
    assert r.status_code == 405 and "not allowed" in reason(r)


def test_audit_log_records_every_change(admin: httpx.Client) -> None:
    before = admin.get(f"{V2}/audit", params={"limit": 1}).json()["total"]
    # a name the caller declares about itself is not taken: the audit log names the principal of the token
    admin.put(f"{V2}/resourcegroups/rg-audit", json={"publishRateInMsgs": 1}, headers={"X-Throttlescope-Actor": "ana"})
    admin.put(f"{V2}/resourcegroups/rg-audit", json={"publishRateInMsgs": 2})
    admin.put(f"{V2}/resourcegroups/rg-audit", json={"publishRateInMsgs": "x"})          # rejected: not audited
    admin.delete(f"{V2}/resourcegroups/rg-audit")
    page = admin.get(f"{V2}/audit", params={"limit": 3}).json()
    assert page["total"] == before + 3
    delete, update, create = page["entries"]
    assert (delete["method"], delete["endpoint"]) == ("DELETE", "/admin/v2/resourcegroups/rg-audit")
    assert delete["oldValue"]["publishRateInMsgs"] == 2 and delete["newValue"] is None
    assert update["oldValue"]["publishRateInMsgs"] == 1 and update["newValue"]["publishRateInMsgs"] == 2
    assert create["oldValue"] is None and create["actor"] == update["actor"] == "admin"
    assert create["policyVersion"] + 2 == delete["policyVersion"] and create["time"] <= delete["time"]
    assert admin.get(f"{V2}/audit", params={"limit": 1, "offset": 1}).json()["entries"][0]["id"] == update["id"]
    assert admin.get(f"{V2}/audit", params={"limit": 0}).status_code == 422
    assert admin.get(f"{V2}/audit", params={"limit": 5000}).status_code == 422


def test_openapi_is_the_contract(shared_cp: ControlPlane) -> None:
    doc = httpx.get(shared_cp.url + "/openapi.json").json()
    ops = [(p, m, op) for p, methods in doc["paths"].items() for m, op in methods.items()]
    assert len(ops) >= 50
    assert all(op.get("summary") for _, _, op in ops)
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    rg = doc["components"]["schemas"]["ResourceGroupBody"]
    assert rg["additionalProperties"] is True and rg["properties"]["publishRateInMsgs"]["description"]
    put = doc["paths"]["/admin/v2/resourcegroups/{group}"]["put"]
    assert {"201", "204", "401", "403", "413", "422"} <= set(put["responses"])
    assert put["responses"]["422"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/Error"
    assert "HTTPValidationError" not in doc["components"]["schemas"]


def test_tenant_lifecycle_in_pulsars_shape(admin: httpx.Client) -> None:
    assert admin.get(f"{V2}/tenants/t-life").status_code == 404
    assert admin.post(f"{V2}/tenants/t-life", json={"adminRoles": []}).status_code == 404     # update: must exist
    assert admin.put(f"{V2}/principals/t-life-admin", json={"role": "tenant-admin"}).status_code == 201
    assert admin.put(f"{V2}/principals/t-life-viewer", json={"role": "viewer"}).status_code == 201
    r = admin.put(f"{V2}/tenants/t-life", json={"adminRoles": ["t-life-admin", "t-life-admin", "someone@else"]})
    assert r.status_code == 204 and int(r.headers["X-Policy-Version"]) == version(admin)
    assert admin.get(f"{V2}/tenants/t-life").json() == {"adminRoles": ["someone@else", "t-life-admin"],
                                                        "allowedClusters": []}
    assert "t-life" in admin.get(f"{V2}/tenants").json()
    r = admin.put(f"{V2}/tenants/t-life", json={})
    assert r.status_code == 409 and "already exists" in r.json()["reason"]
    r = admin.post(f"{V2}/tenants/t-life", json={"adminRoles": ["t-life-viewer"]})
    assert r.status_code == 412 and "'t-life-viewer' (viewer)" in r.json()["reason"]
    r = admin.post(f"{V2}/tenants/t-life", json={"adminRoles": [" padded"], "admins": []})
    assert r.status_code == 422
    assert admin.get(f"{V2}/principals/t-life-admin").json()["adminOf"] == ["t-life"]
    assert admin.delete(f"{V2}/tenants/t-life").status_code == 204
    assert admin.delete(f"{V2}/tenants/t-life").status_code == 404
    assert admin.get(f"{V2}/principals/t-life-admin").json()["adminOf"] == []
