"""Schemathesis against the control plane's own OpenAPI document (the contract), in process (ASGI).

Every operation gets schema-valid (positive) and schema-violating (negative) requests, once per role: as the
super-user (so they reach every handler), as a tenant admin of ``acme`` (a positive case's tenant is ``acme``, so
its own policies are reached too), as a viewer and as a participant. Schemathesis' checks hold for every answer:
no 5xx, documented status codes and bodies, valid input accepted, invalid input rejected. On top: a call the
role may not make (by the rule of tests/controlplane/test_auth_api.py, on the path the server saw) is refused with
403; a rejected call (4xx) changes nothing -- not the stored entries, the principals, the policy version, the
audit log or the live participants; an accepted change moves the version and the audit log by exactly one, under
the role's principal; and at the end everything stored is still a valid value (what a strict body model accepts,
attachments name existing groups), so no invalid value got in by any route.

Bounded: ``EXAMPLES`` per operation and mode (fewer for the roles that are mostly refused), derandomized (the same
cases every run). With 12 examples for the super-user and 6 for a tenant admin the four roles took 200 s of a
20-minute CI budget on 2 cores; these counts still send every operation schema-valid and schema-violating bodies
as every role. The cases are drawn once, for all four roles (each role sends the first of them, to an app of its
own): drawing them -- bodies that match the API's name patterns -- was two thirds of the time, and it was done four
times over.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.config._checks import (
    POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES,
    PositiveDataAcceptanceConfig,
)

from controlplane import broker_settings, views
from controlplane.app import create_app
from controlplane.auth import Tokens
from controlplane.config import Settings
from controlplane.models import (
    NAME_PATTERN,
    QUOTA_ID_PATTERN,
    DispatchRateBody,
    MutationQuotaBody,
    PublishRateBody,
    ResourceGroupBody,
    TenantInfo,
)
from controlplane.policyset import RESOURCE_GROUP, build
from controlplane.principals import TENANT
from controlplane.store import AuditInfo, Reader
from tests.controlplane.test_auth_api import kind_of, may

from .conftest import ADMIN, PARTICIPANT

pytestmark = [pytest.mark.integration, pytest.mark.parallel]
EXAMPLES = {"super-user": 8, "tenant-admin": 4, "viewer": 2, "participant": 2}
PARTICIPANT_PATHS = ("/v1/report", "/v1/goodbye", "/v1/grant")
MUTATING = {"POST", "PUT", "DELETE", "PATCH"}


def fingerprint(app: Any) -> tuple[Any, ...]:
    ctx = app.state.ctx
    stored = ctx.store.read(lambda r: (r.policy_version(), r.all()))
    live = sorted((p.participantId, p.seq, p.reports) for p in views.participants(ctx.live, 0).participants)
    principals = sorted(p.public()["name"] + str(p.revoked) for p in ctx.directory.all())
    return stored[0], ctx.store.audit(1, 0)[0], stored[1], live, principals


def check_stored_values(app: Any) -> int:
    """Every stored entry is what the strict API models accept; returns how many there are."""
    entries: dict[str, dict[str, Any]] = app.state.ctx.store.read(Reader.all)
    name = re.compile(NAME_PATTERN)
    quota_id = re.compile(QUOTA_ID_PATTERN)
    groups = entries.get(RESOURCE_GROUP, {})
    n = 0
    for kind, items in entries.items():
        for key, value in items.items():
            n += 1
            where = f"{kind} {key!r} = {value!r}"
            if kind == RESOURCE_GROUP:
                assert name.match(key), where
                ResourceGroupBody.model_validate(value)
            elif kind.endswith(".resourcegroup"):
                assert all(name.match(part) for part in key.split("/")), where
                assert value in groups, f"{where}: attached to a group that does not exist"
            elif kind.endswith(".publishRate"):
                PublishRateBody.model_validate(value)
            elif kind.endswith("ispatchRate"):
                DispatchRateBody.model_validate(value)
            elif kind == "broker":
                assert broker_settings.parse_value(key, json.dumps(value).strip('"')) == value, where
            elif kind == TENANT:
                assert name.match(key), where
                TenantInfo.model_validate(value)
            elif kind == "mutationquota":
                user, client = json.loads(key)
                assert quota_id.match(user) and quota_id.match(client), where
                MutationQuotaBody.model_validate(value)
            else:
                raise AssertionError(f"unexpected stored kind: {where}")
    return n


def principal_for(app: Any, role: str) -> tuple[str, str]:
    """(name, token) of a principal of ``role``; a tenant admin administers ``acme``."""
    if role == "super-user":
        return "admin", ADMIN
    if role == "participant":
        return "participant", PARTICIPANT
    ctx = app.state.ctx
    name = "acme-admin" if role == "tenant-admin" else "vic"
    _, token = ctx.directory.create(name, role, AuditInfo("admin", "PUT", f"/admin/v2/principals/{name}"), "admin")
    if role == "tenant-admin":
        ctx.store.change(TENANT, "acme", {"adminRoles": [name], "allowedClusters": []},
                         AuditInfo("admin", "PUT", "/admin/v2/tenants/acme"))
    return name, token


@dataclass(frozen=True)
class Drawn:
    """The API's operations; every operation's cases for each generation mode, the most any role sends; and the
    operations no negative case exists for."""

    operations: list[Any]
    cases: list[tuple[Any, GenerationMode, list[Any]]]
    impossible: list[str]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory: pytest.TempPathFactory) -> Drawn:
    # (the cases are bound to this app's schema, whose checks are configured here; each role calls an app of its own)
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("fuzz-draw"), report_interval_s=3600.0),
                     Tokens(admin=ADMIN, participant=PARTICIPANT))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    schema.config.generation.update(with_security_parameters=False)  # the role's token is sent on every call
    # an invalid body may be rejected for its size before its content is read: 413 is a rejection too
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    # a valid request the state refuses: 404 and 409, and Pulsar's 412 (a group that does not exist or is in use,
    # a broker setting that is unknown or cannot take the value -- no schema can know which)
    schema.config.checks.positive_data_acceptance = PositiveDataAcceptanceConfig(
        expected_statuses=[*POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES, "412"])
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 60, "the OpenAPI document lists fewer operations than the API has"
    cases: list[tuple[Any, GenerationMode, list[Any]]] = []
    impossible: list[str] = []
    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                cases.append((op, mode, _draw(op, mode)))
            except Unsatisfiable:        # no way to violate an operation without parameters or body
                impossible.append(f"{op.method.upper()} {op.path}")
    return Drawn(operations, cases, impossible)


def _draw(op: Any, mode: GenerationMode) -> list[Any]:
    got: list[Any] = []

    @given(case=op.as_strategy(generation_mode=mode))
    @settings(max_examples=max(EXAMPLES.values()), deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def draw(case: Any) -> None:
        got.append(case)

    draw()
    return got


@pytest.mark.parametrize("role", list(EXAMPLES))
def test_fuzzing_the_openapi_finds_no_5xx_no_accepted_invalid_value_and_rejections_store_nothing(
        tmp_path: Path, role: str, drawn: Drawn) -> None:
    # report interval 1 h: nobody expires during the run, so the live state only moves when a call moves it
    app = create_app(Settings(data_dir=tmp_path, report_interval_s=3600.0), Tokens(admin=ADMIN, participant=PARTICIPANT))
    name, token = principal_for(app, role)
    statuses: Counter[tuple[str, int]] = Counter()
    failures: list[str] = []

    def exercise(case: Any, mode: GenerationMode) -> None:
        method = case.operation.method.upper()
        path = case.operation.path
        before = fingerprint(app)
        response = case.call(headers={"Authorization": f"Bearer {token}"}, app=app)
        statuses[mode.value, response.status_code] += 1
        case.validate_response(response, transport_kwargs={"app": app})   # no 5xx, documented answers, valid in
        after = fingerprint(app)                                          # / invalid out
        seen = unquote(urlsplit(response.request.url).path)    # the path as the server saw it
        parts = seen.strip("/").split("/")
        tenant = parts[3] if len(parts) > 3 else None
        if not may(role, kind_of(method.lower(), seen), tenant):
            assert response.status_code == 403, f"{role} {method} {seen}: {response.status_code}, not 403"
        if 400 <= response.status_code < 500:
            assert after == before, f"a {response.status_code} {method} {path} changed what is stored"
        elif method in MUTATING and path not in PARTICIPANT_PATHS:
            assert after[0] == before[0] + 1 and after[1] == before[1] + 1, "one change, one version"
            assert response.headers["x-policy-version"] == [str(after[0])]
            assert app.state.ctx.store.audit(1, 0)[1][0]["actor"] == name

    for op, mode, cases in drawn.cases:
        for case in cases[:EXAMPLES[role]]:
            own_tenant = (role == "tenant-admin" and mode == GenerationMode.POSITIVE
                          and "tenant" in (case.path_parameters or {}))
            drawn_tenant = case.path_parameters["tenant"] if own_tenant else None
            if own_tenant:
                case.path_parameters["tenant"] = "acme"      # its own tenant: reach its handlers too
            try:
                exercise(case, mode)
            except (Exception, BaseExceptionGroup) as e:  # noqa: BLE001 - collect, report them all at the end
                failures.append(f"{op.method.upper()} {op.path} ({mode.value}): {str(e)[:1500]}")
            finally:
                if own_tenant:
                    case.path_parameters["tenant"] = drawn_tenant   # (the other roles send the case as drawn)

    assert not failures, "\n\n".join(failures)
    accepted = sum(n for (mode, code), n in statuses.items() if code < 300)
    rejected = sum(n for (mode, code), n in statuses.items() if 400 <= code < 500)
    print(f"\nFUZZ as {role}: {len(drawn.operations)} operations, {sum(statuses.values())} calls: {accepted} accepted, "
          f"{rejected} rejected; by (mode, status): {sorted(statuses.items())}; "
          f"no negative case possible for {len(drawn.impossible)} operation(s)")
    changed = statuses["positive", 201] + statuses["positive", 204]
    refused = statuses["positive", 403] + statuses["negative", 403]
    if role == "super-user":
        assert changed >= 100 and refused == 0, "the fuzzing hardly reached the handlers"
        assert statuses["negative", 422] >= 300, "invalid input was hardly tried"
    elif role == "tenant-admin":
        assert changed >= 20 and refused >= 100, "its own policies were hardly changed, or others' hardly tried"
    else:
        assert refused >= 100 and statuses["negative", 422] >= 30
    assert not any(code >= 500 for _, code in statuses)
    stored = check_stored_values(app)
    assert stored >= {"super-user": 20, "tenant-admin": 5}.get(role, 0)
    ps = app.state.ctx.store.read(build)             # and the participants' document builds from it
    assert ps.version == app.state.ctx.store.policy_version()
