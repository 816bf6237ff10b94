"""Auth beyond tests/controlplane/test_auth_api.py (which walks the OpenAPI document: no token 401, an unknown or
the participant token 403 on every mutating endpoint, the right one accepted; tokens absent from the log).

Here: near-miss tokens (a prefix, one character more, another case, another scheme, the token in the query, a
header without a scheme) are refused on every mutating endpoint and never echoed; tokens are never compared, only
looked up by their SHA-256 digest (by inspection of the modules that handle tokens, and by counting: every
presented token is hashed once, whole); token files are 0600 and the data directory 0700 even under ``umask 000``; and no
token appears in ``/metrics``, the state and audit endpoints, the OpenAPI document, the control plane's log (debug)
or a participant's log, after admin calls, reports, refused calls and a participant with a wrong token.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import re
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane import auth, middleware, principals
from controlplane.auth import Tokens
from controlplane.principals import Directory
from controlplane.store import Store
from tests.controlplane.conftest import REPO, clean_env, report

from .conftest import ADMIN, PARTICIPANT, ControlPlane, scrape

pytestmark = pytest.mark.parallel

MUTATING = {"post", "put", "delete", "patch"}
SAMPLE = {"name": "dispatchThrottlingRateInMsg", "value": "1", "user": "u", "clientId": "c"}
NEAR_MISSES: list[tuple[str, dict[str, str], int]] = [
    # (what, headers, expected status): 401 = no usable bearer token, 403 = a bearer token that is not the admin's
    ("admin token minus its last character", {"Authorization": f"Bearer {ADMIN[:-1]}"}, 403),
    ("admin token plus one character", {"Authorization": f"Bearer {ADMIN}x"}, 403),
    ("admin token upper-cased", {"Authorization": f"Bearer {ADMIN.upper()}"}, 403),
    ("admin token reversed", {"Authorization": f"Bearer {ADMIN[::-1]}"}, 403),
    ("participant token", {"Authorization": f"Bearer {PARTICIPANT}"}, 403),
    ("admin token, Basic scheme", {"Authorization": f"Basic {ADMIN}"}, 401),
    ("admin token, Token scheme", {"Authorization": f"Token {ADMIN}"}, 401),
    ("admin token without a scheme", {"Authorization": ADMIN}, 401),
    ("Bearer and nothing", {"Authorization": "Bearer"}, 401),
    ("admin token in a cookie", {"Cookie": f"token={ADMIN}"}, 401),
    ("admin token in X-Api-Key", {"X-Api-Key": ADMIN}, 401),
]


@pytest.mark.integration
def test_near_miss_tokens_are_refused_on_every_mutating_endpoint_and_never_echoed(start_cp: Any) -> None:
    cp: ControlPlane = start_cp()
    doc = httpx.get(cp.url + "/openapi.json").json()
    ops = [(m.upper(), re.sub(r"\{(\w+)\}", lambda g: SAMPLE.get(g.group(1), "x"), path), "requestBody" in op)
           for path, methods in doc["paths"].items() for m, op in methods.items() if m in MUTATING]
    admin_only = [(m, p, b) for m, p, b in ops if p not in ("/v1/report", "/v1/goodbye", "/v1/grant")]
    assert len(admin_only) >= 30
    failures = []
    with httpx.Client(base_url=cp.url, timeout=10) as c:
        for method, path, has_body in admin_only:
            for what, headers, status in NEAR_MISSES:
                r = c.request(method, path, headers=headers, json={} if has_body else None)
                if r.status_code != status or ADMIN in r.text or ADMIN[:-1] in r.text or PARTICIPANT in r.text:
                    failures.append(f"{method} {path} with {what}: {r.status_code} {r.text[:200]}")
            r = c.request(method, path, params={"token": ADMIN, "access_token": ADMIN},
                          json={} if has_body else None)
            if r.status_code != 401:
                failures.append(f"{method} {path} with the admin token in the query: {r.status_code}")
    assert not failures, "\n".join(failures)
    admin = cp.client(ADMIN)
    assert admin.get("/admin/v2/audit").json()["total"] == 0 and admin.get("/healthz").json()["policyVersion"] == 1


@pytest.mark.unit
def test_tokens_are_found_by_their_digest_and_never_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # by inspection: no ==, !=, in, startswith ... on anything named like a token where tokens are handled
    secretish = re.compile(r"token|given|presented|secret", re.I)

    def names(node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
            n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}

    offending = []
    for module in (auth, principals, middleware):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Compare):
                ops = {type(op) for op in node.ops}
                if ops & {ast.Eq, ast.NotEq, ast.In, ast.NotIn} and any(secretish.search(n) for n in names(node)):
                    offending.append(f"{module.__name__}: {ast.unparse(node)}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "startswith", "endswith", "find", "index") and any(
                    secretish.search(n) for n in names(node.func.value)):
                offending.append(f"{module.__name__}: {ast.unparse(node)}")
    assert not offending, f"variable-time comparisons on tokens: {offending}"
    assert "self._by_digest.get(digest(token))" in inspect.getsource(Directory.lookup)

    # by counting: each presented token is hashed once, whole, and only its digest is looked up
    directory = Directory(Store(tmp_path), Tokens(ADMIN, PARTICIPANT))
    hashed: list[bytes] = []
    real = hashlib.sha256

    def counting(data: bytes) -> Any:
        hashed.append(data)
        return real(data)

    monkeypatch.setattr(principals.hashlib, "sha256", counting)
    for presented, name in ((ADMIN, "admin"), (PARTICIPANT, "participant"), (ADMIN[:-1], None),
                            (ADMIN + "x", None), ("x", None), ("ü" * 40, None)):
        hashed.clear()
        found = directory.lookup(presented)
        assert (found.name if found else None) == name
        assert hashed == [presented.encode("utf-8", "surrogateescape")]


@pytest.mark.unit
def test_token_files_are_0600_and_the_data_dir_0700_even_under_umask_000(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # the real start-up, up to the point it gives up binding a port that is taken: the tokens are in place by then
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = subprocess.run([sys.executable, "-m", "controlplane", "--port", str(taken.getsockname()[1]),
                               "--data-dir", str(data)], cwd=REPO, env=clean_env(), capture_output=True,
                              text=True, timeout=60, preexec_fn=lambda: os.umask(0))
    assert done.returncode != 0 and "address already in use" in done.stderr, done.stderr
    for name in ("admin.token", "participant.token"):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


PARTICIPANT_WITH_DEBUG_LOG = """
import logging, time
logging.basicConfig(level=logging.DEBUG)
from collectors import participant
p = participant()
producer = p.producer("acme/web/t")
for _ in range(30):
    producer.acquire(1)
    time.sleep(0.05)
print("last error:", p.reporter.last_error)
"""


@pytest.mark.integration
def test_no_token_in_metrics_state_audit_openapi_or_any_log(start_cp: Any) -> None:
    cp: ControlPlane = start_cp(args=["--log-level", "debug", "--report-interval", "0.5"])
    admin, part = cp.client(ADMIN), cp.client(PARTICIPANT)
    assert admin.put("/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": 100}).status_code == 201
    assert admin.post("/admin/v2/namespaces/acme/web/resourcegroup/rg").status_code == 204
    assert admin.post("/admin/v2/persistent/acme/web/t/publishRate",
                      json={"publishThrottlingRateInMsg": 50}).status_code == 204
    for seq in (1, 2):
        r = part.post("/v1/report", json=report(pid="p1", seq=seq, usage=[{
            "level": "resource_group", "name": "rg", "direction": "publish", "usage_msgs_per_s": 5}],
            counters=[{"level": "resource_group", "name": "rg", "kind": "publish", "admitted_msgs_total": 10}]))
        assert r.status_code == 200 and r.json()["accepted"]
    for token in (ADMIN[:-1], PARTICIPANT + "0", "Bearer-guess-0123456789"):   # refused calls log their request
        cp.client(token).put("/admin/v2/resourcegroups/no", json={})
    part.post("/v1/report", json={"participant": {"participant_id": ADMIN}})  # a 422 that carries a secret-like id
    # a real participant process with the wrong token, debug logging: its reports are refused
    proc = subprocess.run(
        [sys.executable, "-c", PARTICIPANT_WITH_DEBUG_LOG],
        cwd=REPO, env=clean_env(THROTTLESCOPE_URL=cp.url, THROTTLESCOPE_TOKEN=ADMIN[::-1],
                                THROTTLESCOPE_REPORT_INTERVAL_S="0.5"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "HTTP 403" in proc.stderr and "last error: HTTP 403" in proc.stdout   # it tried, and said why it failed
    seen = {"participant log": proc.stderr + proc.stdout}
    seen["/metrics"] = scrape(cp)
    assert "throttlescope_admitted_messages_total" in seen["/metrics"]
    for path in ("/v1/state/participants", "/v1/state/buckets", "/v1/state/resourcegroups", "/v1/state/history",
                 "/admin/v2/audit", "/v1/policies", "/openapi.json", "/healthz"):
        seen[path] = admin.get(path).text
    time.sleep(0.2)
    cp.stop()
    seen["control plane log"] = cp.stderr()
    assert "PUT /admin/v2/resourcegroups/no" in seen["control plane log"]     # requests are logged ...
    for where, text in seen.items():
        for secret in (ADMIN, PARTICIPANT, ADMIN[::-1], ADMIN[:-1], "Bearer-guess-0123456789"):
            assert secret not in text, f"a token appears in {where}"     # ... without any token
