"""Broker dynamic settings (Pulsar's shape), KIP-599 mutation quotas per (user, client-id), and the audit log.

Broker settings answer as Pulsar's ``BrokersBase`` does, so ``BrokersImpl`` reads them unchanged: a POST of an
unknown (or non-dynamic) setting, or of a value the setting cannot take, is 412 (``PreconditionFailedException``);
``/configuration/values`` lists only the settings overridden (set and not deleted), ``/configuration/runtime``
every dynamic setting's value in force (defaults included); a DELETE of a setting that is not overridden succeeds
(a change all the same: audited, a new policy version). Values are JSON-typed (``true``, ``1000``) where Pulsar
sends text; its client reads either into its ``Map<String, String>``.
"""

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from controlplane import broker_settings as bs
from controlplane.context import Context, done, get_ctx
from controlplane.errors import ApiError, not_found
from controlplane.models import AuditPage, MutationQuotaBody, QuotaClient, QuotaUser
from controlplane.policyset import BROKER, MUTATION_QUOTA, quota_key
from controlplane.store import Reader
from protocol import MAX_COUNT, MutationQuota, MutationQuotaEntry

router = APIRouter(prefix="/admin/v2")
Ctx = Annotated[Context, Depends(get_ctx)]
CHANGED = {204: {"description": "Changed; the new policy version is in the X-Policy-Version header"}}
SettingName = Annotated[str, Path(max_length=128, description=f"One of: {', '.join(bs.SETTINGS)}")]


def _known(name: str) -> None:
    if name not in bs.SETTINGS:
        raise ApiError(412, bs.unknown_reason(name))


@router.get("/brokers/configuration", response_model=list[str], tags=["brokers"],
            summary="Names of the broker dynamic settings")
def setting_names() -> list[str]:
    return list(bs.SETTINGS)


@router.get("/brokers/configuration/values", response_model=dict[str, bool | int | float | str], tags=["brokers"],
            summary="The broker dynamic settings that are overridden, and their values (Pulsar's meaning)")
def setting_values(ctx: Ctx) -> dict[str, Any]:
    return ctx.store.items(BROKER)


@router.get("/brokers/configuration/runtime", response_model=dict[str, bool | int | float | str], tags=["brokers"],
            summary="Every broker dynamic setting's value in force (defaults included)")
def setting_runtime(ctx: Ctx) -> dict[str, Any]:
    return bs.effective(ctx.store.items(BROKER))


@router.post("/brokers/configuration/{name}/{value}", status_code=204, tags=["brokers"],
             summary="Set a broker dynamic setting",
             description="Rates: a number >= 0, or -1 (0 and -1 disable the limit). Booleans: true or false. "
                         "Choices: one of the listed words. "
                         "preciseDispatcherFlowControl and dispatchThrottlingOnBatchMessageEnabled are mutually "
                         "exclusive (409 when enabling one while the other is on). Settings: "
                         + "; ".join(f"{n} ({s.type}, default {json.dumps(s.default)}): {s.doc}"
                                     for n, s in bs.SETTINGS.items()),
             responses={409: {"description": "Conflicts with another setting"},
                        412: {"description": "Unknown setting, or a value it cannot take"}, **CHANGED})
def set_setting(name: SettingName, value: Annotated[str, Path(max_length=64)], request: Request,
                ctx: Ctx) -> Response:
    _known(name)
    try:
        parsed = bs.parse_value(name, value)
    except bs.SettingError as e:
        raise ApiError(412, str(e)) from None

    def check(r: Reader, old: Any) -> None:
        if name in bs.MUTUALLY_EXCLUSIVE and parsed is True:
            other = next(o for o in bs.MUTUALLY_EXCLUSIVE if o != name)
            if bs.effective(r.items(BROKER))[other] is True:
                raise ApiError(409, f"{name} and {other} are mutually exclusive; set {other} to false first")
    return done(ctx.change(request, BROKER, name, parsed, check))


@router.delete("/brokers/configuration/{name}", status_code=204, tags=["brokers"],
               summary="Reset a broker dynamic setting to its default (succeeds when it is not overridden)",
               responses={412: {"description": "Unknown setting"}, **CHANGED})
def reset_setting(name: SettingName, request: Request, ctx: Ctx) -> Response:
    _known(name)
    return done(ctx.change(request, BROKER, name, None))


@router.get("/quotas/mutations", response_model=list[MutationQuotaEntry], tags=["quotas"],
            summary="List mutation quotas (KIP-599) per (user, client-id)")
def list_quotas(ctx: Ctx) -> list[dict[str, Any]]:
    out = []
    for key, value in ctx.store.items(MUTATION_QUOTA).items():
        user, client = json.loads(key)
        out.append({"user": user, "clientId": client, **value})
    return sorted(out, key=lambda d: (d["user"], d["clientId"]))


QUOTA_DOC = "'<default>' as user or client id sets the default (Kafka's convention)."


@router.get("/quotas/mutations/{user}/{clientId}", response_model=MutationQuota, tags=["quotas"],
            summary="Get the mutation quota of (user, client-id)", description=QUOTA_DOC,
            responses={404: {"description": "Not set"}})
def get_quota(user: QuotaUser, clientId: QuotaClient, ctx: Ctx) -> Any:
    value = ctx.store.get(MUTATION_QUOTA, quota_key(user, clientId))
    if value is None:
        raise not_found(f"no mutation quota for user {user!r}, client id {clientId!r}")
    return value


@router.put("/quotas/mutations/{user}/{clientId}", status_code=204, tags=["quotas"],
            summary="Create or update the mutation quota of (user, client-id)", description=QUOTA_DOC,
            responses={201: {"description": "Created", "model": MutationQuota}, **CHANGED})
def put_quota(user: QuotaUser, clientId: QuotaClient, body: MutationQuotaBody, request: Request,
              ctx: Ctx) -> Response:
    value = body.known()
    change = ctx.change(request, MUTATION_QUOTA, quota_key(user, clientId), value)
    return done(change, created=change.old is None, body=value, ignored=body.ignored())


@router.delete("/quotas/mutations/{user}/{clientId}", status_code=204, tags=["quotas"],
               summary="Remove the mutation quota of (user, client-id)",
               responses={404: {"description": "Not set"}, **CHANGED})
def delete_quota(user: QuotaUser, clientId: QuotaClient, request: Request, ctx: Ctx) -> Response:
    def check(r: Reader, old: Any) -> None:
        if old is None:
            raise not_found(f"no mutation quota for user {user!r}, client id {clientId!r}")
    return done(ctx.change(request, MUTATION_QUOTA, quota_key(user, clientId), None, check))


@router.get("/audit", response_model=AuditPage, tags=["audit"],
            summary="The audit log of every change, newest first")
def audit(ctx: Ctx, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
          offset: Annotated[int, Query(ge=0, le=MAX_COUNT)] = 0) -> dict[str, Any]:
    total, entries = ctx.store.audit(limit, offset)
    return {"total": total, "entries": entries}
