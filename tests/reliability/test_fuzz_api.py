"""Schemathesis against the control plane's own OpenAPI document (the contract, DESIGN §5), in process (ASGI).

Every operation gets schema-valid (positive) and schema-violating (negative) requests, authenticated with the admin
token so they reach the handlers. Schemathesis' checks hold for every answer: no 5xx, documented status codes and
bodies, valid input accepted, invalid input rejected. On top: a rejected call (4xx) changes nothing -- not the
stored entries, the policy version, the audit log or the live participants; an accepted admin change moves the
version and the audit log by exactly one; and at the end everything stored is still a valid value (what a strict
body model accepts, attachments name existing groups), so no invalid value got in by any route.

Bounded: ``EXAMPLES`` per operation and mode, derandomized (the same cases every run); about 40 s.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from controlplane import broker_settings
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
)
from controlplane.policyset import RESOURCE_GROUP, build
from controlplane.store import Reader

from .conftest import ADMIN, PARTICIPANT

pytestmark = pytest.mark.integration
EXAMPLES = 12
PARTICIPANT_PATHS = ("/v1/report", "/v1/goodbye")
MUTATING = {"POST", "PUT", "DELETE", "PATCH"}


def fingerprint(app: Any) -> tuple[Any, ...]:
    ctx = app.state.ctx
    stored = ctx.store.read(lambda r: (r.policy_version(), r.all()))
    live = sorted((p["participantId"], p["seq"], p["reports"]) for p in ctx.live.participants(0)["participants"])
    return stored[0], ctx.store.audit(1, 0)[0], stored[1], live


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
            elif kind == "mutationquota":
                user, client = json.loads(key)
                assert quota_id.match(user) and quota_id.match(client), where
                MutationQuotaBody.model_validate(value)
            else:
                raise AssertionError(f"unexpected stored kind: {where}")
    return n


def test_fuzzing_the_openapi_finds_no_5xx_no_accepted_invalid_value_and_rejections_store_nothing(
        tmp_path: Path) -> None:
    # report interval 1 h: nobody expires during the run, so the live state only moves when a call moves it
    app = create_app(Settings(data_dir=tmp_path, report_interval_s=3600.0), Tokens(admin=ADMIN, participant=PARTICIPANT))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    schema.config.generation.update(with_security_parameters=False)  # the admin token is sent on every call
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 60, "the OpenAPI document lists fewer operations than the API has"
    statuses: Counter[tuple[str, int]] = Counter()
    failures: list[str] = []
    impossible: list[str] = []

    def exercise(op: Any, mode: GenerationMode) -> None:
        method = op.method.upper()

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def one(case: Any) -> None:
            before = fingerprint(app)
            response = case.call(headers={"Authorization": f"Bearer {ADMIN}"})
            statuses[mode.value, response.status_code] += 1
            case.validate_response(response)   # no 5xx, documented answers, valid in / invalid out
            after = fingerprint(app)
            if 400 <= response.status_code < 500:
                assert after == before, f"a {response.status_code} {method} {op.path} changed what is stored"
            elif method in MUTATING and op.path not in PARTICIPANT_PATHS:
                assert after[0] == before[0] + 1 and after[1] == before[1] + 1, "one change, one version"
                assert response.headers["x-policy-version"] == [str(after[0])]

        one()

    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                exercise(op, mode)
            except Unsatisfiable:        # no way to violate an operation without parameters or body
                impossible.append(f"{op.method.upper()} {op.path}")
            except (Exception, BaseExceptionGroup) as e:  # noqa: BLE001 - collect, report them all at the end
                failures.append(f"{op.method.upper()} {op.path} ({mode.value}): {str(e)[:1500]}")

    assert not failures, "\n\n".join(failures)
    accepted = sum(n for (mode, code), n in statuses.items() if code < 300)
    rejected = sum(n for (mode, code), n in statuses.items() if 400 <= code < 500)
    print(f"\nFUZZ {len(operations)} operations, {sum(statuses.values())} calls: {accepted} accepted, "
          f"{rejected} rejected; by (mode, status): {sorted(statuses.items())}; "
          f"no negative case possible for {len(impossible)} operation(s)")
    assert statuses["positive", 201] + statuses["positive", 204] >= 100, "the fuzzing hardly reached the handlers"
    assert statuses["negative", 422] >= 300, "invalid input was hardly tried"
    assert not any(code >= 500 for _, code in statuses)
    stored = check_stored_values(app)
    assert stored >= 20
    ps = app.state.ctx.store.read(build)             # and the participants' document builds from it
    assert ps.version == app.state.ctx.store.policy_version()
