"""Pulsar's Java admin client works unchanged against the control plane.

Every call goes through ``pulsar_admin.PulsarAdmin``, which sends exactly what ``pulsar-client-admin`` sends and
reads the answer as it does (2xx success, 204 or empty = null, unknown fields ignored, String results raw, error
statuses as the client's exception classes). Covered: resource groups (create, read, partial update, delete, in
use), attaching and detaching them to namespaces and topics, namespace, topic and subscription rates (set, read,
unset reads and deletes, ``applied``, ``isGlobal``, ``non-persistent``), broker dynamic settings, and the error
cases. A real control plane, on a free loopback port.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from .conftest import ADMIN, PARTICIPANT, ControlPlane
from .pulsar_admin import (
    ConflictException,
    DispatchRate,
    NotAllowedException,
    NotAuthorizedException,
    NotFoundException,
    PreconditionFailedException,
    PublishRate,
    PulsarAdmin,
    PulsarAdminException,
    ResourceGroup,
)

pytestmark = [pytest.mark.integration, pytest.mark.parallel]


@pytest.fixture(scope="module")
def admin(shared_cp: ControlPlane) -> Iterator[PulsarAdmin]:
    client = PulsarAdmin(shared_cp.url, ADMIN)
    yield client
    client.close()


def version(admin: PulsarAdmin) -> int:
    return admin.http.get("/healthz").json()["policyVersion"]


def audited(admin: PulsarAdmin) -> int:
    return admin.http.get("/admin/v2/audit", params={"limit": 1}).json()["total"]


# ---------------------------------------------------------------- resource groups

def test_resource_group_create_read_partial_update_delete(admin: PulsarAdmin) -> None:
    rgs = admin.resourceGroups
    rgs.createResourceGroup("rg-java", ResourceGroup(publishRateInMsgs=1000, dispatchRateInBytes=5_000_000))
    sent = admin.sent[-1]
    assert (sent.method, sent.url.path, sent.headers["content-type"]) == (
        "PUT", "/admin/v2/resourcegroups/rg-java", "application/json")
    assert sent.content == b'{"publishRateInMsgs": 1000, "dispatchRateInBytes": 5000000}'   # no null fields
    assert rgs.getResourceGroup("rg-java") == ResourceGroup(1000, -1, -1, 5_000_000)
    assert "rg-java" in rgs.getResourceGroups()
    # pulsar-admin resourcegroups update rg-java --msg-publish-rate 5000: that field only, the others are kept
    rgs.updateResourceGroup("rg-java", ResourceGroup(publishRateInMsgs=5000))
    assert [r.method for r in admin.sent[-2:]] == ["GET", "PUT"]
    assert rgs.getResourceGroup("rg-java") == ResourceGroup(5000, -1, -1, 5_000_000)
    rgs.updateResourceGroup("rg-java", ResourceGroup(publishRateInBytes=64, dispatchRateInMsgs=0))
    assert rgs.getResourceGroup("rg-java") == ResourceGroup(5000, 64, 0, 5_000_000)
    rgs.deleteResourceGroup("rg-java")
    with pytest.raises(NotFoundException, match="does not exist"):
        rgs.getResourceGroup("rg-java")
    with pytest.raises(NotFoundException):
        rgs.updateResourceGroup("rg-java", ResourceGroup(publishRateInMsgs=1))   # the client's GET finds nothing
    with pytest.raises(NotFoundException):
        rgs.deleteResourceGroup("rg-java")
    assert "rg-java" not in rgs.getResourceGroups()


def test_pulsar_3_fields_and_our_extensions_do_not_break_either_side(admin: PulsarAdmin) -> None:
    rgs = admin.resourceGroups
    rgs.createResourceGroup("rg-repl", ResourceGroup(publishRateInMsgs=7, replicationDispatchRateInMsgs=100,
                                                     replicationDispatchRateInBytes=2000))
    ignored = admin.http.put("/admin/v2/resourcegroups/rg-repl", json={"replicationDispatchRateInBytes": 1})
    assert ignored.status_code == 204 and ignored.headers["X-Ignored-Fields"] == "replicationDispatchRateInBytes"
    # our quotaStrategy comes back in the answer; the client ignores a field it does not know
    assert admin.http.put("/admin/v2/resourcegroups/rg-repl", json={"quotaStrategy": "proportional"}).is_success
    assert admin.http.get("/admin/v2/resourcegroups/rg-repl").json()["quotaStrategy"] == "proportional"
    assert rgs.getResourceGroup("rg-repl") == ResourceGroup(publishRateInMsgs=7, publishRateInBytes=-1,
                                                            dispatchRateInMsgs=-1, dispatchRateInBytes=-1)
    rgs.deleteResourceGroup("rg-repl")


def test_a_group_in_use_cannot_be_deleted_and_a_missing_one_cannot_be_attached(admin: PulsarAdmin) -> None:
    rgs, ns = admin.resourceGroups, admin.namespaces
    with pytest.raises(PreconditionFailedException, match="'rg-use' does not exist"):
        ns.setNamespaceResourceGroup("acme/use", "rg-use")
    with pytest.raises(PreconditionFailedException, match="does not exist"):
        admin.topicPolicies().setResourceGroup("persistent://acme/use/t", "rg-use")
    rgs.createResourceGroup("rg-use", ResourceGroup(dispatchRateInMsgs=10))
    ns.setNamespaceResourceGroup("acme/use", "rg-use")
    admin.topicPolicies().setResourceGroup("persistent://acme/use/t", "rg-use")
    with pytest.raises(PreconditionFailedException) as refused:
        rgs.deleteResourceGroup("rg-use")
    assert "topic acme/use/t" in refused.value.reason and "namespace acme/use" in refused.value.reason
    assert "detach it first" in refused.value.reason
    ns.removeNamespaceResourceGroup("acme/use")
    admin.topicPolicies().removeResourceGroup("persistent://acme/use/t")
    rgs.deleteResourceGroup("rg-use")


# ---------------------------------------------------------------- namespace attach / detach

def test_namespace_resource_group_is_read_as_the_bare_name_and_unset_is_null(admin: PulsarAdmin) -> None:
    ns = admin.namespaces
    admin.resourceGroups.createResourceGroup("rg-ns", ResourceGroup())
    assert ns.getNamespaceResourceGroup("acme/attach") is None
    v0 = version(admin)
    ns.removeNamespaceResourceGroup("acme/attach")           # none attached: succeeds (and is audited)
    assert version(admin) == v0 + 1
    ns.setNamespaceResourceGroup("acme/attach", "rg-ns")
    sent = admin.sent[-1]
    assert (sent.method, sent.content, sent.headers["content-type"]) == ("POST", b"", "application/json")
    assert ns.getNamespaceResourceGroup("acme/attach") == "rg-ns"          # not '"rg-ns"'
    ns.removeNamespaceResourceGroup("acme/attach")
    assert ns.getNamespaceResourceGroup("acme/attach") is None
    admin.resourceGroups.deleteResourceGroup("rg-ns")


# ---------------------------------------------------------------- namespace rates

def test_namespace_rates_set_read_unset(admin: PulsarAdmin) -> None:
    ns, where = admin.namespaces, "acme/rates"
    for get, set_, remove, value in (
            (ns.getPublishRate, ns.setPublishRate, ns.removePublishRate, PublishRate(2000, -1)),
            (ns.getDispatchRate, ns.setDispatchRate, ns.removeDispatchRate, DispatchRate(50, 4096, False, 2)),
            (ns.getSubscriptionDispatchRate, ns.setSubscriptionDispatchRate, ns.removeSubscriptionDispatchRate,
             DispatchRate(5, -1, False, 1))):
        assert get(where) is None                            # 204, no body: the client's null
        assert admin.sent[-1].url.path.startswith("/admin/v2/namespaces/acme/rates/")
        before = audited(admin)
        remove(where)                                        # removing what is not set succeeds
        assert audited(admin) == before + 1
        set_(where, value)
        assert get(where) == value
        remove(where)
        assert get(where) is None


def test_relative_dispatch_rates_are_refused_with_the_reason(admin: PulsarAdmin) -> None:
    with pytest.raises(PulsarAdminException) as refused:
        admin.namespaces.setDispatchRate("acme/rel", DispatchRate(100, -1, True, 1))
    assert refused.value.status == 400 and type(refused.value) is PulsarAdminException
    assert "relativeToPublishRate must be false" in refused.value.reason
    with pytest.raises(PulsarAdminException, match="relativeToPublishRate"):
        admin.topicPolicies().setSubscriptionDispatchRate("persistent://acme/rel/t", DispatchRate(1, -1, True, 1),
                                                          subscription="s")
    assert admin.namespaces.getDispatchRate("acme/rel") is None


# ---------------------------------------------------------------- topic policies

@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_topic_rates_set_read_unset_and_applied(admin: PulsarAdmin, domain: str) -> None:
    tp, topic = admin.topicPolicies(), f"{domain}://acme/tp-{domain}/clicks"
    assert tp.getPublishRate(topic) is None and tp.getDispatchRate(topic) is None
    assert tp.getSubscriptionDispatchRate(topic) is None
    assert admin.sent[-1].url.params["applied"] == "false"            # the client always says which it wants
    tp.removePublishRate(topic)
    tp.removeDispatchRate(topic)
    tp.removeSubscriptionDispatchRate(topic)
    # applied=true: the namespace's value when the topic has none, else the broker default
    assert tp.getDispatchRate(topic, applied=True) == DispatchRate(0, 0, False, 1)
    admin.namespaces.setDispatchRate(f"acme/tp-{domain}", DispatchRate(300, -1, False, 1))
    assert tp.getDispatchRate(topic, applied=True) == DispatchRate(300, -1, False, 1)
    assert tp.getDispatchRate(topic) is None
    tp.setPublishRate(topic, PublishRate(10, 1024))
    tp.setDispatchRate(topic, DispatchRate(20, -1, False, 3))
    tp.setSubscriptionDispatchRate(topic, DispatchRate(7, -1, False, 1))
    assert tp.getPublishRate(topic) == PublishRate(10, 1024)
    assert tp.getDispatchRate(topic) == tp.getDispatchRate(topic, applied=True) == DispatchRate(20, -1, False, 3)
    assert tp.getSubscriptionDispatchRate(topic) == DispatchRate(7, -1, False, 1)
    other = "non-persistent" if domain == "persistent" else "persistent"   # one topic, either domain
    assert tp.getPublishRate(topic.replace(domain, other, 1)) == PublishRate(10, 1024)
    for remove in (tp.removePublishRate, tp.removeDispatchRate, tp.removeSubscriptionDispatchRate):
        remove(topic)
    assert tp.getDispatchRate(topic, applied=True) == DispatchRate(300, -1, False, 1)
    admin.namespaces.removeDispatchRate(f"acme/tp-{domain}")


def test_is_global_policies_are_the_same_policies(admin: PulsarAdmin) -> None:
    local, global_ = admin.topicPolicies(), admin.topicPolicies(is_global=True)
    topic = "persistent://acme/glob/t"
    global_.setPublishRate(topic, PublishRate(99, -1))
    assert admin.sent[-1].url.params["isGlobal"] == "true"
    assert local.getPublishRate(topic) == global_.getPublishRate(topic) == PublishRate(99, -1)
    r = admin.http.get("/admin/v2/persistent/acme/glob/t/publishRate", params={"isGlobal": "maybe"})
    assert r.status_code == 422 and "isGlobal" in r.json()["reason"]
    global_.removePublishRate(topic)
    assert local.getPublishRate(topic) is None


def test_per_subscription_dispatch_rate(admin: PulsarAdmin) -> None:
    tp, topic = admin.topicPolicies(), "persistent://acme/subs/orders"
    assert tp.getSubscriptionDispatchRate(topic, subscription="audit") is None
    assert admin.sent[-1].url.path == "/admin/v2/persistent/acme/subs/orders/audit/dispatchRate"
    tp.removeSubscriptionDispatchRate(topic, subscription="audit")
    assert tp.getSubscriptionDispatchRate(topic, subscription="audit", applied=True) == DispatchRate(0, 0, False, 1)
    tp.setSubscriptionDispatchRate(topic, DispatchRate(40, -1, False, 1))            # the topic's, per subscription
    assert tp.getSubscriptionDispatchRate(topic, subscription="audit", applied=True) == DispatchRate(40, -1, False, 1)
    tp.setSubscriptionDispatchRate(topic, DispatchRate(4, 512, False, 1), subscription="audit")
    assert tp.getSubscriptionDispatchRate(topic, subscription="audit") == DispatchRate(4, 512, False, 1)
    assert tp.getSubscriptionDispatchRate(topic, subscription="audit", applied=True) == DispatchRate(4, 512, False, 1)
    assert tp.getSubscriptionDispatchRate(topic, subscription="billing") is None
    assert tp.getSubscriptionDispatchRate(topic) == DispatchRate(40, -1, False, 1)
    effective = admin.http.get("/admin/v2/persistent/acme/subs/orders/effectiveLimits",
                               params={"subscription": "audit"}).json()["subscriptionDispatchRate"]
    assert effective["source"] == "subscription" and effective["rate"]["msgs"] == 4
    tp.removeSubscriptionDispatchRate(topic, subscription="audit")
    tp.removeSubscriptionDispatchRate(topic)
    assert tp.getSubscriptionDispatchRate(topic, subscription="audit") is None


def test_topic_level_resource_group(admin: PulsarAdmin) -> None:
    tp, topic = admin.topicPolicies(), "persistent://acme/tgroups/clicks"
    admin.resourceGroups.createResourceGroup("rg-topic", ResourceGroup(publishRateInMsgs=100))
    admin.resourceGroups.createResourceGroup("rg-wide", ResourceGroup(publishRateInMsgs=1000))
    assert tp.getResourceGroup(topic) is None and tp.getResourceGroup(topic, applied=True) is None
    admin.namespaces.setNamespaceResourceGroup("acme/tgroups", "rg-wide")
    assert tp.getResourceGroup(topic) is None
    assert tp.getResourceGroup(topic, applied=True) == "rg-wide"             # the one that applies
    tp.setResourceGroup(topic, "rg-topic")
    sent = admin.sent[-1]
    assert (sent.method, sent.content, sent.headers["content-type"]) == ("POST", b"rg-topic", "application/json")
    assert tp.getResourceGroup(topic) == tp.getResourceGroup(topic, applied=True) == "rg-topic"
    assert admin.topicPolicies().getResourceGroup("non-persistent://acme/tgroups/clicks") == "rg-topic"
    tp.removeResourceGroup(topic)                                              # POST with no body
    assert admin.sent[-1].method == "POST" and admin.sent[-1].content == b""
    assert tp.getResourceGroup(topic) is None and tp.getResourceGroup(topic, applied=True) == "rg-wide"
    r = admin.http.post("/admin/v2/persistent/acme/tgroups/clicks/resourceGroup", content=b'"rg-topic"')
    assert r.status_code == 422 and "bare name (without JSON quotes)" in r.json()["reason"]
    r = admin.http.post("/admin/v2/persistent/acme/tgroups/clicks/resourceGroup", content=b"\xff")
    assert r.status_code == 422 and "not UTF-8" in r.json()["reason"]
    admin.namespaces.removeNamespaceResourceGroup("acme/tgroups")
    for group in ("rg-topic", "rg-wide"):
        admin.resourceGroups.deleteResourceGroup(group)


# ---------------------------------------------------------------- broker settings

def test_broker_dynamic_settings(admin: PulsarAdmin) -> None:
    brokers = admin.brokers
    names = brokers.getDynamicConfigurationNames()
    assert "dispatchThrottlingRateInMsg" in names
    runtime = brokers.getRuntimeConfigurations()
    assert set(runtime) == set(names) and runtime["dispatchThrottlingOnNonBacklogConsumerEnabled"] == "true"
    assert "dispatchThrottlingRateInMsg" not in brokers.getAllDynamicConfigurations()   # only what is overridden
    brokers.updateDynamicConfiguration("dispatchThrottlingRateInMsg", "250")
    sent = admin.sent[-1]
    assert (sent.method, sent.url.path, sent.content) == (
        "POST", "/admin/v2/brokers/configuration/dispatchThrottlingRateInMsg/250", b"")
    assert brokers.getAllDynamicConfigurations()["dispatchThrottlingRateInMsg"] == "250"
    assert brokers.getRuntimeConfigurations()["dispatchThrottlingRateInMsg"] == "250"
    brokers.deleteDynamicConfiguration("dispatchThrottlingRateInMsg")
    brokers.deleteDynamicConfiguration("dispatchThrottlingRateInMsg")      # not overridden: succeeds
    assert brokers.getRuntimeConfigurations()["dispatchThrottlingRateInMsg"] == "0"
    v0 = version(admin)
    with pytest.raises(PreconditionFailedException, match="unknown or non-dynamic broker setting 'brokerServicePort'"):
        brokers.updateDynamicConfiguration("brokerServicePort", "6650")
    with pytest.raises(PreconditionFailedException, match="-1 to disable"):
        brokers.updateDynamicConfiguration("dispatchThrottlingRateInMsg", "fast")
    with pytest.raises(PreconditionFailedException, match="'true' or 'false'"):
        brokers.updateDynamicConfiguration("preciseDispatcherFlowControl", "sometimes")
    with pytest.raises(PreconditionFailedException):
        brokers.deleteDynamicConfiguration("brokerServicePort")
    assert version(admin) == v0                                              # nothing refused was stored
    brokers.updateDynamicConfiguration("preciseDispatcherFlowControl", "true")
    with pytest.raises(ConflictException, match="mutually exclusive"):
        brokers.updateDynamicConfiguration("dispatchThrottlingOnBatchMessageEnabled", "true")
    brokers.deleteDynamicConfiguration("preciseDispatcherFlowControl")


# ---------------------------------------------------------------- errors as the client's exception classes

def test_error_statuses_are_the_clients_exception_classes(shared_cp: ControlPlane, admin: PulsarAdmin) -> None:
    anonymous, participant = PulsarAdmin(shared_cp.url, None), PulsarAdmin(shared_cp.url, PARTICIPANT)
    try:
        with pytest.raises(NotAuthorizedException) as no_token:
            anonymous.namespaces.getPublishRate("acme/err")
        assert no_token.value.status == 401 and "needs" in no_token.value.reason
        with pytest.raises(NotAuthorizedException) as not_enough:
            participant.namespaces.setPublishRate("acme/err", PublishRate(1, -1))
        assert not_enough.value.status == 403 and " may not " in not_enough.value.reason
        with pytest.raises(NotFoundException):
            admin.resourceGroups.getResourceGroup("rg-none")
        with pytest.raises(NotAllowedException) as not_allowed:
            admin.brokers._call("PUT", "brokers/configuration/dispatchThrottlingRateInMsg/1")   # the client POSTs
        assert "not allowed" in not_allowed.value.reason
    finally:
        anonymous.close()
        participant.close()


def test_every_error_body_is_a_reason(admin: PulsarAdmin) -> None:
    """Pulsar's ErrorData: the client reads ``reason``; ours says what was wrong and what is allowed."""
    responses = [admin.http.post("/admin/v2/brokers/configuration/nope/1"),
                 admin.http.post("/admin/v2/namespaces/acme/x/resourcegroup/nope"),
                 admin.http.post("/admin/v2/namespaces/acme/x/dispatchRate", json={"relativeToPublishRate": True}),
                 admin.http.post("/admin/v2/namespaces/acme/x/publishRate", json={"publishThrottlingRateInMsg": -3})]
    for r in responses:
        assert r.status_code >= 400 and set(r.json()) == {"reason"}, r.text
    assert [r.status_code for r in responses] == [412, 412, 400, 422]
    assert "the dynamic settings are:" in responses[0].json()["reason"]
    assert "create it with PUT /admin/v2/resourcegroups/nope" in responses[1].json()["reason"]
    assert "-1 for unlimited" in responses[3].json()["reason"]


def test_what_the_client_sends_is_what_pulsar_admin_sends(admin: PulsarAdmin) -> None:
    """The wire format this module relies on, checked once: headers and bodies of a few recorded calls."""
    ns = admin.namespaces
    ns.setDispatchRate("acme/wire", DispatchRate(1, 2, False, 1))
    sent = admin.sent[-1]
    assert sent.headers["accept"] == "application/json" and sent.headers["authorization"] == f"Bearer {ADMIN}"
    assert sent.headers["user-agent"].startswith("Pulsar-Java-v")
    assert httpx.Response(200, content=sent.content).json() == {
        "dispatchThrottlingRateInMsg": 1, "dispatchThrottlingRateInByte": 2, "relativeToPublishRate": False,
        "ratePeriodInSecond": 1}
    ns.setPublishRate("acme/wire", PublishRate(3, 4))
    assert httpx.Response(200, content=admin.sent[-1].content).json() == {
        "publishThrottlingRateInMsg": 3, "publishThrottlingRateInByte": 4}
    ns.removeDispatchRate("acme/wire")
    ns.removePublishRate("acme/wire")
