"""What Pulsar's Java admin client (``pulsar-client-admin``) sends, and how it reads the answer, in Python.

Each method sends exactly the request its Java namesake sends (``ResourceGroupsImpl``, ``NamespacesImpl``,
``TopicPoliciesImpl``, ``BrokersImpl`` with ``BaseResource``): method, path, query, body and headers; and reads the
answer the way that client does:

- any 2xx is success; a 204 or an empty body is ``None`` (Java's null);
- bodies are bound as Jackson binds them with Pulsar's ``ObjectMapperFactory``: unknown fields ignored, numbers
  coerced to the Java field's type (a float into an ``int`` field is truncated), a ``Map<String, String>`` takes
  every JSON scalar as its text; a ``String`` result is the raw body (Jersey's String reader), quotes and all;
- what Java serialises: ``ResourceGroup`` without its null fields (``Include.NON_NULL``), ``PublishRate`` and
  ``DispatchRate`` with all their (primitive) fields;
- an error status becomes the exception class ``BaseResource.getApiException`` makes (401 and 403
  ``NotAuthorizedException``, 404 ``NotFoundException``, 405 ``NotAllowedException``, 409 ``ConflictException``,
  412 ``PreconditionFailedException``, other 4xx ``PulsarAdminException``, 5xx ``ServerSideErrorException``), with
  the server's ``ErrorData.reason``.

``PulsarAdmin(url, token).namespaces.getPublishRate("acme/web")`` mirrors ``admin.namespaces().getPublishRate``;
``topicPolicies(is_global=True)`` mirrors ``admin.topicPolicies(true)`` (every topic call then carries
``isGlobal=true``). ``sent`` keeps every request, to check what went on the wire.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any
from urllib.parse import quote

import httpx

JSON = "application/json"
USER_AGENT = "Pulsar-Java-v4.0.0"


class PulsarAdminException(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status, self.reason = status, reason


class NotAuthorizedException(PulsarAdminException):
    pass


class NotFoundException(PulsarAdminException):
    pass


class NotAllowedException(PulsarAdminException):
    pass


class ConflictException(PulsarAdminException):
    pass


class PreconditionFailedException(PulsarAdminException):
    pass


class ServerSideErrorException(PulsarAdminException):
    pass


EXCEPTIONS = {401: NotAuthorizedException, 403: NotAuthorizedException, 404: NotFoundException,
              405: NotAllowedException, 409: ConflictException, 412: PreconditionFailedException}


@dataclasses.dataclass
class PublishRate:
    """org.apache.pulsar.common.policies.data.PublishRate (int, long)."""

    publishThrottlingRateInMsg: int = -1
    publishThrottlingRateInByte: int = -1


@dataclasses.dataclass
class DispatchRate:
    """org.apache.pulsar.common.policies.data.impl.DispatchRateImpl (int, long, boolean, int)."""

    dispatchThrottlingRateInMsg: int = -1
    dispatchThrottlingRateInByte: int = -1
    relativeToPublishRate: bool = False
    ratePeriodInSecond: int = 1


@dataclasses.dataclass
class ResourceGroup:
    """org.apache.pulsar.common.policies.data.ResourceGroup (boxed: null when not set), Pulsar 3.x/4.x."""

    publishRateInMsgs: int | None = None
    publishRateInBytes: int | None = None
    dispatchRateInMsgs: int | None = None
    dispatchRateInBytes: int | None = None
    replicationDispatchRateInMsgs: int | None = None
    replicationDispatchRateInBytes: int | None = None


def _bind(cls: type, doc: dict[str, Any]) -> Any:
    """Jackson: known fields only, coerced to the field's Java type."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in doc and doc[f.name] is not None:
            v = doc[f.name]
            out[f.name] = v if isinstance(v, bool) else int(v)
    return cls(**out)


def _text(v: Any) -> str:
    """A JSON scalar as Jackson's String deserializer gives it (true -> "true", 1e6 -> "1000000.0")."""
    return ("true" if v else "false") if isinstance(v, bool) else str(float(v)) if isinstance(v, float) else str(v)


class _Resource:
    def __init__(self, http: httpx.Client, sent: list[httpx.Request], query: dict[str, str] | None = None) -> None:
        self._http, self._sent, self._query = http, sent, query or {}

    def _call(self, method: str, path: str, *, body: Any = None, raw: bytes | None = None,
              query: dict[str, str] | None = None) -> httpx.Response:
        headers = {"Accept": JSON}
        if body is not None or raw is not None:
            headers["Content-Type"] = JSON
        content = json.dumps(body).encode() if body is not None else raw
        request = self._http.build_request(method, "/admin/v2/" + path, headers=headers, content=content,
                                           params={**self._query, **(query or {})})
        self._sent.append(request)
        response = self._http.send(request)
        if response.status_code >= 300:
            try:
                reason = response.json()["reason"]
            except (ValueError, KeyError, TypeError):
                reason = response.text
            cls = EXCEPTIONS.get(response.status_code,
                                 ServerSideErrorException if response.status_code >= 500 else PulsarAdminException)
            raise cls(response.status_code, reason)
        return response

    def _get(self, path: str, as_type: Any, query: dict[str, str] | None = None) -> Any:
        r = self._call("GET", path, query=query)
        if r.status_code == 204 or not r.content:
            return None
        if as_type is str:
            return r.text
        doc = r.json()
        if as_type == "map":
            return {k: _text(v) for k, v in doc.items()}
        return doc if as_type is list else _bind(as_type, doc)

    def _send(self, method: str, path: str, entity: Any = None) -> None:
        """A set/remove call: any 2xx completes the future with null."""
        body = None if entity is None else {k: v for k, v in dataclasses.asdict(entity).items() if v is not None}
        self._call(method, path, body=body, raw=b"" if method == "POST" and entity is None else None)


def _ns(namespace: str) -> str:
    return "namespaces/" + namespace


def _topic(topic: str) -> str:
    """TopicName.getRestPath(): 'persistent://t/ns/x' -> 'persistent/t/ns/x' (local name encoded)."""
    domain, _, name = topic.partition("://")
    tenant, namespace, local = name.split("/", 2)
    return f"{domain}/{tenant}/{namespace}/{quote(local, safe='')}"


class ResourceGroups(_Resource):
    def getResourceGroups(self) -> list[str]:
        return self._get("resourcegroups", list)

    def getResourceGroup(self, name: str) -> ResourceGroup | None:
        return self._get(f"resourcegroups/{name}", ResourceGroup)

    def createResourceGroup(self, name: str, rg: ResourceGroup) -> None:
        self._send("PUT", f"resourcegroups/{name}", rg)

    def updateResourceGroup(self, name: str, rg: ResourceGroup) -> None:
        self.getResourceGroup(name)          # the Java client reads it first: NotFoundException when missing
        self._send("PUT", f"resourcegroups/{name}", rg)

    def deleteResourceGroup(self, name: str) -> None:
        self._send("DELETE", f"resourcegroups/{name}")


class Namespaces(_Resource):
    def getNamespaceResourceGroup(self, namespace: str) -> str | None:
        return self._get(f"{_ns(namespace)}/resourcegroup", str)

    def setNamespaceResourceGroup(self, namespace: str, group: str) -> None:
        self._send("POST", f"{_ns(namespace)}/resourcegroup/{group}")

    def removeNamespaceResourceGroup(self, namespace: str) -> None:
        self._send("DELETE", f"{_ns(namespace)}/resourcegroup")

    def getPublishRate(self, namespace: str) -> PublishRate | None:
        return self._get(f"{_ns(namespace)}/publishRate", PublishRate)

    def setPublishRate(self, namespace: str, rate: PublishRate) -> None:
        self._send("POST", f"{_ns(namespace)}/publishRate", rate)

    def removePublishRate(self, namespace: str) -> None:
        self._send("DELETE", f"{_ns(namespace)}/publishRate")

    def getDispatchRate(self, namespace: str) -> DispatchRate | None:
        return self._get(f"{_ns(namespace)}/dispatchRate", DispatchRate)

    def setDispatchRate(self, namespace: str, rate: DispatchRate) -> None:
        self._send("POST", f"{_ns(namespace)}/dispatchRate", rate)

    def removeDispatchRate(self, namespace: str) -> None:
        self._send("DELETE", f"{_ns(namespace)}/dispatchRate")

    def getSubscriptionDispatchRate(self, namespace: str) -> DispatchRate | None:
        return self._get(f"{_ns(namespace)}/subscriptionDispatchRate", DispatchRate)

    def setSubscriptionDispatchRate(self, namespace: str, rate: DispatchRate) -> None:
        self._send("POST", f"{_ns(namespace)}/subscriptionDispatchRate", rate)

    def removeSubscriptionDispatchRate(self, namespace: str) -> None:
        self._send("DELETE", f"{_ns(namespace)}/subscriptionDispatchRate")


def _applied(applied: bool) -> dict[str, str]:
    return {"applied": "true" if applied else "false"}


class TopicPolicies(_Resource):
    """TopicPoliciesImpl."""

    def getPublishRate(self, topic: str) -> PublishRate | None:
        return self._get(f"{_topic(topic)}/publishRate", PublishRate)

    def setPublishRate(self, topic: str, rate: PublishRate) -> None:
        self._send("POST", f"{_topic(topic)}/publishRate", rate)

    def removePublishRate(self, topic: str) -> None:
        self._send("DELETE", f"{_topic(topic)}/publishRate")

    def getDispatchRate(self, topic: str, applied: bool = False) -> DispatchRate | None:
        return self._get(f"{_topic(topic)}/dispatchRate", DispatchRate, _applied(applied))

    def setDispatchRate(self, topic: str, rate: DispatchRate) -> None:
        self._send("POST", f"{_topic(topic)}/dispatchRate", rate)

    def removeDispatchRate(self, topic: str) -> None:
        self._send("DELETE", f"{_topic(topic)}/dispatchRate")

    def _subscription_path(self, topic: str, subscription: str | None) -> str:
        """The topic's subscriptionDispatchRate, or with a subscription name its own dispatchRate (Java's
        ``(topic, subscriptionName, ...)`` overloads)."""
        if subscription is None:
            return f"{_topic(topic)}/subscriptionDispatchRate"
        return f"{_topic(topic)}/{quote(subscription, safe='')}/dispatchRate"

    def getSubscriptionDispatchRate(self, topic: str, subscription: str | None = None,
                                    applied: bool = False) -> DispatchRate | None:
        return self._get(self._subscription_path(topic, subscription), DispatchRate, _applied(applied))

    def setSubscriptionDispatchRate(self, topic: str, rate: DispatchRate, subscription: str | None = None) -> None:
        self._send("POST", self._subscription_path(topic, subscription), rate)

    def removeSubscriptionDispatchRate(self, topic: str, subscription: str | None = None) -> None:
        self._send("DELETE", self._subscription_path(topic, subscription))

    def getResourceGroup(self, topic: str, applied: bool = False) -> str | None:
        return self._get(f"{_topic(topic)}/resourceGroup", str, _applied(applied))

    def setResourceGroup(self, topic: str, group: str | None) -> None:
        """The name is the body as it is (Jersey writes a String raw, labelled application/json)."""
        self._call("POST", f"{_topic(topic)}/resourceGroup", raw=(group or "").encode())

    def removeResourceGroup(self, topic: str) -> None:
        self.setResourceGroup(topic, None)   # the Java client's remove is a set to null: an empty body


class Brokers(_Resource):
    def getDynamicConfigurationNames(self) -> list[str]:
        return self._get("brokers/configuration", list)

    def getAllDynamicConfigurations(self) -> dict[str, str]:
        return self._get("brokers/configuration/values", "map")

    def getRuntimeConfigurations(self) -> dict[str, str]:
        return self._get("brokers/configuration/runtime", "map")

    def updateDynamicConfiguration(self, name: str, value: str) -> None:
        self._send("POST", f"brokers/configuration/{name}/{quote(value, safe='')}")   # Codec.encode(value)

    def deleteDynamicConfiguration(self, name: str) -> None:
        self._send("DELETE", f"brokers/configuration/{name}")


class PulsarAdmin:
    """``PulsarAdmin.builder().serviceHttpUrl(url).authentication(AuthenticationToken(token))``."""

    def __init__(self, url: str, token: str | None) -> None:
        headers = {"User-Agent": USER_AGENT}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        self.http = httpx.Client(base_url=url, headers=headers, timeout=10)
        self.sent: list[httpx.Request] = []
        self.resourceGroups = ResourceGroups(self.http, self.sent)
        self.namespaces = Namespaces(self.http, self.sent)
        self.brokers = Brokers(self.http, self.sent)

    def topicPolicies(self, is_global: bool = False) -> TopicPolicies:
        return TopicPolicies(self.http, self.sent, {"isGlobal": "true"} if is_global else None)

    def close(self) -> None:
        self.http.close()


CLIENT_CLASSES = {"resourceGroups()": ResourceGroups, "namespaces()": Namespaces,
                  "topicPolicies()": TopicPolicies, "brokers()": Brokers}


def java_calls() -> set[str]:
    """Every Java call mirrored here, as ``resourceGroups().createResourceGroup`` (the compatibility doc's names;
    Java's overloads are one method here)."""
    return {f"{accessor}.{name}" for accessor, cls in CLIENT_CLASSES.items()
            for name in vars(cls) if not name.startswith("_")}
