"""The Limits page's forms: one per kind of policy, each turning its inputs into a ``Pending`` change.

How and why
-----------
Nothing is sent from here. A form shows the current value (prefilled from ``/v1/policies``; the widget keys
include the target, so picking another topic shows that topic's values), the allowed range next to every input
(``derive.LIMIT_RULE``; number inputs stop at -1), and on "Review" checks the values (``derive.check_limit``)
and reads the value stored now (the old side). A valid form returns a ``Pending`` (old -> new, the request to
send); the page asks for confirmation and only then calls ``data.send``. What the form cannot check (a name
the control plane refuses, two broker settings that exclude each other) comes back as the control plane's
``{"reason"}``.

Rights: each form asks ``refusal(method, path)`` about the request it would send (the page answers with the
control plane's own rule, ``data.refusal``); when the signed-in principal may not send it, the form stays
visible but read-only, with the control plane's reason beside it (a tenant admin looking at another tenant's
namespace, a viewer anywhere, anyone but a super-user on resource groups, broker settings and mutation quotas).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import streamlit as st

from dashboard import data, derive

__all__ = ["Pending", "Refusal", "resource_group", "level_policy", "subscription", "broker", "mutation_quota"]

HELP = f"Allowed: {derive.LIMIT_RULE}."
PERIOD_HELP = "Allowed: a whole number of seconds, 1..86400."
CHOICE_HELP = "One of the values the setting allows (defaultQuotaStrategy: fair or proportional)."
Refusal = Callable[[str, str], str | None]   # (method, path) -> why the signed-in principal may not, or None


@dataclass(frozen=True)
class Pending:
    title: str
    method: str
    path: str
    body: Any
    old: dict[str, Any] | None
    new: dict[str, Any] | None


def _target(where: Any, label: str, known: list[str], key: str, help: str) -> str:
    """A known name to pick, or any other to type (a text input while none is known)."""
    if not known:
        return where.text_input(label, key=f"{key}.typed", help=help).strip()
    return (where.selectbox(label, known, key=key, accept_new_options=True, help=help) or "").strip()


def _named(target: str, parts: int) -> bool:
    """``tenant/namespace`` (2 parts) or ``tenant/namespace/topic`` (3), none empty; the rest is the server's."""
    return len(target.split("/")) == parts and all(target.split("/"))


def _num(v: float) -> int | float:
    return int(v) if float(v).is_integer() else float(v)


def _limit(label: str, value: float, key: str, disabled: bool = False) -> float:
    return st.number_input(label, min_value=-1.0, value=float(value), step=1.0, format="%g", key=key, help=HELP,
                           disabled=disabled)


def _now(cur: dict[str, Any], labels: dict[str, str]) -> None:
    """The stored values in words under the inputs (which take -1 for unlimited): "Now: publish msgs/s 40, publish
    bytes/s unlimited", or "Now: not set"."""
    st.caption("Now: " + (", ".join(f"{label} {derive.limit_text(cur.get(f))}" for f, label in labels.items())
                          if cur else "not set"))


def _review(key: str, values: dict[str, Any], disabled: bool, why: str | None = None) -> bool:
    """The Review button; False (with the allowed range shown) when a limit is out of range, and disabled with the
    reason shown when the signed-in principal may not make this change."""
    st.caption(f"Limits: {derive.LIMIT_RULE}.")
    if why:
        st.info(f"Read-only for you: {why}", icon=":material/lock:")
    if not st.button("Review change", key=key, disabled=disabled or why is not None, icon=":material/rate_review:"):
        return False
    problems = [f"{name}: {msg}" for name, v in values.items() if (msg := derive.check_limit(v))]
    for p in problems:
        st.error(p, icon=":material/block:")
    return not problems


def _old(conn: data.Conn, path: str) -> tuple[bool, Any]:
    got = data.current(conn, path)
    if isinstance(got, data.Unavailable):
        if got.status in (400, 422):
            st.error(f"The control plane refuses this: {got.reason}. Nothing was changed.", icon=":material/block:")
        else:
            st.error(f"Cannot read the current value ({got.reason}); nothing was changed.")
        return False, None
    return True, got


def _pending(conn: data.Conn, title: str, method: str, path: str, body: Any, new: dict | None,
             read: str | None = None) -> Pending | None:
    """The change, with the current value read from ``read`` (default: ``path`` itself)."""
    ok, old = _old(conn, read or path)
    return Pending(title, method, path, body, old, new) if ok else None


def resource_group(conn: data.Conn, ps: dict[str, Any], refusal: Refusal) -> Pending | None:
    groups = sorted(ps.get("resourceGroups", {}))
    pick = st.selectbox("Resource group", [*groups, "+ new group"], key="rg.pick")
    name = st.text_input("New group name", key="rg.new", placeholder="e.g. batch-jobs") if pick == "+ new group" \
        else pick
    cur = ps.get("resourceGroups", {}).get(name or "", {})
    fields = ("publishRateInMsgs", "publishRateInBytes", "dispatchRateInMsgs", "dispatchRateInBytes")
    labels = ("Publish msgs/s", "Publish bytes/s", "Dispatch msgs/s", "Dispatch bytes/s")
    cols = st.columns(4)
    values = {f: cols[i].number_input(labels[i], min_value=-1.0, value=float(cur.get(f, -1)), step=1.0,
                                      format="%g", key=f"rg.{name}.{f}", help=HELP)
              for i, f in enumerate(fields)}
    _now(cur, {f: label.lower() for f, label in zip(fields, labels, strict=True)})
    attach = st.text_input("Attach to namespace (tenant/namespace) or tenant (optional)", key=f"rg.{name}.attach",
                           help="Everything under it then shares this group's quota (PIP-82).").strip()
    method, path = ("POST", data.attachment_path(attach, name)) if attach else \
        ("PUT", data.resource_group_path(name or "new"))
    if not _review("rg.review", values, not name, refusal(method, path)):
        return None
    if attach:
        return _pending(conn, f"attach resource group {name} to {attach}", method, path, None, {"resourceGroup": name},
                        read=data.attachment_path(attach))
    body = {f: _num(v) for f, v in values.items()}
    return _pending(conn, f"resource group {name}", method, path, body, body)


def _rate(prefix: str, policy: str, cur: dict[str, Any], key: str) -> dict[str, Any]:
    word = "publish" if policy == "publishRate" else "dispatch"
    m, b = (f"{word}ThrottlingRateInMsg", f"{word}ThrottlingRateInByte")
    c1, c2, c3 = st.columns(3)
    out = {m: c1.number_input(f"{prefix} {word} limit, messages per period", min_value=-1.0,
                              value=float(cur.get(m, -1)), step=1.0, format="%g", key=f"{key}.m", help=HELP),
           b: c2.number_input(f"{prefix} {word} limit, bytes per period", min_value=-1.0,
                              value=float(cur.get(b, -1)), step=1.0, format="%g", key=f"{key}.b", help=HELP),
           "ratePeriodInSecond": c3.number_input("Period (s)", min_value=1, max_value=86400,
                                                 value=int(cur.get("ratePeriodInSecond", 1)), step=1,
                                                 key=f"{key}.p", help=PERIOD_HELP)}
    # every field the form does not show is kept as it is (a publish rate's adaptive settings, switched by the
    # admin API): the change is a PUT, and a body without them would reset them
    out.update({k: v for k, v in cur.items() if k not in out})
    _now(cur, {m: "messages per period", b: "bytes per period"})
    return out


def _rate_change(conn: data.Conn, title: str, path: str, values: dict[str, Any], remove: bool,
                 review_key: str, valid: bool, refusal: Refusal) -> Pending | None:
    limits = {k: v for k, v in values.items() if k.endswith(("Msg", "Byte"))}
    why = refusal("DELETE" if remove else "PUT", path) if valid else None
    if not _review(review_key, {} if remove else limits, not valid, why):
        return None
    if remove:
        return _pending(conn, f"remove {title}", "DELETE", path, None, None)
    body = {k: _num(v) if not isinstance(v, bool) else v for k, v in values.items()}
    return _pending(conn, title, "PUT", path, body, body)


def level_policy(conn: data.Conn, ps: dict[str, Any], scope: str, known: list[str],
                 refusal: Refusal) -> Pending | None:
    """Namespace ('tenant/ns') or topic ('tenant/ns/topic') publishRate / dispatchRate."""
    parts = 2 if scope == "namespace" else 3
    example = "acme/web" if parts == 2 else "acme/web/clicks"
    c1, c2 = st.columns([3, 2])
    target = _target(c1, scope.capitalize(), known, f"{scope}.target",
                     f"Pick one or type another: {'/'.join(['tenant', 'namespace', 'topic'][:parts])}, e.g. {example}")
    policy = c2.selectbox("Policy", ["publishRate", "dispatchRate"], key=f"{scope}.policy")
    cur = ((ps.get("namespaces" if parts == 2 else "topics", {}).get(target) or {}).get(policy)) or {}
    values = _rate(scope.capitalize(), policy, cur, f"{scope}.{target}.{policy}")
    remove = st.checkbox("Remove this policy (back to the default)", key=f"{scope}.{target}.{policy}.rm",
                         disabled=not cur)
    valid = _named(target, parts)
    if not valid:
        st.caption(f"A {scope} is named {'/'.join(['tenant', 'namespace', 'topic'][:parts])}, e.g. {example}.")
    return _rate_change(conn, f"{scope} {target} {policy}", data.rate_path(scope, target, policy), values, remove,
                        f"{scope}.review", valid, refusal)


def subscription(conn: data.Conn, ps: dict[str, Any], known: dict[str, list[str]],
                 refusal: Refusal) -> Pending | None:
    """subscriptionDispatchRate: the dispatch limit of each subscription, set on a namespace or a topic."""
    c1, c2 = st.columns([1, 3])
    scope = c1.radio("Set on", ["topic", "namespace"], key="sub.scope", horizontal=True)
    target = _target(c2, f"{scope.capitalize()} (each of its subscriptions)", known[scope], f"sub.{scope}",
                     "Pick one or type another")
    cur = ((ps.get("topics" if scope == "topic" else "namespaces", {}).get(target) or {})
           .get("subscriptionDispatchRate")) or {}
    values = _rate("Subscription", "subscriptionDispatchRate", cur, f"sub.{scope}.{target}")
    remove = st.checkbox("Remove this policy", key=f"sub.{scope}.{target}.rm", disabled=not cur)
    valid = _named(target, 3 if scope == "topic" else 2)
    return _rate_change(conn, f"{scope} {target} subscriptionDispatchRate",
                        data.rate_path(scope, target, "subscriptionDispatchRate"), values, remove, "sub.review",
                        valid, refusal)


def broker(conn: data.Conn, settings: dict[str, Any], refusal: Refusal) -> Pending | None:
    names = list(settings)
    offload = "managedLedgerOffloadBrokerFlowPermitsPerSecond"
    name = st.selectbox("Broker setting (per process)", names, key="broker.name",
                        index=names.index(offload) if offload in names else 0,
                        help="Offload flow permits (bytes/s) are managedLedgerOffloadBrokerFlowPermitsPerSecond")
    cur = settings[name]
    number = not isinstance(cur, bool | str)
    if isinstance(cur, bool):
        value: Any = st.toggle(name, value=cur, key=f"broker.{name}")
    elif isinstance(cur, str):   # a choice (defaultQuotaStrategy): the control plane names the values it allows
        value = st.text_input(name, value=cur, key=f"broker.{name}", help=CHOICE_HELP).strip()
    else:
        value = _limit(f"{name} (0 or -1 disables)", cur, f"broker.{name}")
        _now({name: cur}, {name: name})
    text = str(value).lower() if isinstance(value, bool) else quote(value, safe="") if isinstance(value, str) \
        else f"{_num(value)}"
    path = data.broker_setting_path(name, text)
    if not _review("broker.review", {name: value} if number else {}, not text, refusal("POST", path)):
        return None
    new = _num(value) if number else value
    return Pending(f"broker setting {name}", "POST", path, None, {name: cur}, {name: new})


def mutation_quota(conn: data.Conn, ps: dict[str, Any], refusal: Refusal) -> Pending | None:
    c1, c2 = st.columns(2)
    user = c1.text_input("User", value="<default>", key="mq.user", help="A user, or <default> (Kafka's convention)")
    client = c2.text_input("Client id", value="<default>", key="mq.client", help="A client id, or <default>")
    cur = next((q for q in ps.get("mutationQuotas", []) if q["user"] == user and q["clientId"] == client), {})
    k = f"mq.{user}.{client}"
    c1, c2, c3, c4 = st.columns(4)
    quota = c1.number_input("Mutations per second", min_value=-1.0, value=float(cur.get("quotaPerSecond", 10)),
                            step=1.0, format="%g", key=f"{k}.q", help=HELP)
    window = c2.number_input("Window (s)", min_value=0.001, max_value=3600.0, value=float(cur.get("windowSeconds", 1)),
                             format="%g", key=f"{k}.w", help="Allowed: > 0 and <= 3600 seconds.")
    samples = c3.number_input("Samples", min_value=1, max_value=1000, value=int(cur.get("samples", 11)), step=1,
                              key=f"{k}.s", help="Allowed: 1..1000. Burst = quota x samples x window.")
    strict = c4.toggle("Strict (reject when in debt)", value=bool(cur.get("strict", True)), key=f"{k}.strict")
    _now(cur, {"quotaPerSecond": "mutations per second"})
    path = data.mutation_quota_path(user, client)
    if not _review("mq.review", {"quotaPerSecond": quota}, False, refusal("PUT", path)):
        return None
    body = {"quotaPerSecond": _num(quota), "windowSeconds": _num(window), "samples": int(samples), "strict": strict}
    return _pending(conn, f"mutation quota {user} / {client}", "PUT", path, body, body)
