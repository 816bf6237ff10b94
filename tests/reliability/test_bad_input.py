"""Bad input over HTTP and on the command line, against real processes.

Bodies: every operation that takes a body (enumerated from the served OpenAPI document, participant endpoints
included) refuses oversized bodies (413, with and without a Content-Length), deeply nested JSON and a bad
Content-Length (400), malformed or non-UTF-8 JSON, JSON of the wrong shape and wrong content types (422), always with
a JSON ``reason``; and none of it stores anything (tests/controlplane/test_admin_api.py checks one endpoint's
messages in detail; this covers them all).

Start-up: flags and environment values out of range stop the control plane, a participant process and the Spark
jobs' CLI with a message naming the setting and a non-zero exit, without a traceback where we own the entry point
(tests/controlplane/test_durability.py covers --port 99999, --report-interval -1, THROTTLESCOPE_PORT=abc and a short
admin token; tests/collectors/test_runtime.py the participant variables in process).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.controlplane.conftest import REPO, clean_env, free_port

from .conftest import ADMIN, PARTICIPANT, ControlPlane

pytestmark = pytest.mark.parallel

SAMPLE = {"name": "dispatchThrottlingRateInMsg", "value": "1", "user": "u", "clientId": "c"}
MIB = 1024 * 1024


def body_operations(cp: ControlPlane) -> list[tuple[str, str, bool]]:
    """(method, path, takes JSON) of every operation with a body; the others take text (a bare name)."""
    doc = httpx.get(cp.url + "/openapi.json").json()
    ops = [(method.upper(), re.sub(r"\{(\w+)\}", lambda m: SAMPLE.get(m.group(1), "x"), path),
            "application/json" in op["requestBody"]["content"])
           for path, methods in doc["paths"].items() for method, op in methods.items() if "requestBody" in op]
    assert len(ops) >= 20 and ("POST", "/v1/report", True) in ops and ("POST", "/v1/goodbye", True) in ops
    return ops


def raw(cp: ControlPlane, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    """One request on a plain socket, headers exactly as given (httpx would fix a bad Content-Length)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", cp.port), timeout=10) as s:
        s.sendall(head.encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]


def chunks(total: int):
    sent = 0
    while sent < total:
        yield b"x" * min(65536, total - sent)
        sent += 65536


JSON = {"content-type": "application/json"}
CASES: list[tuple[str, dict[str, str], Any, int, str]] = [
    # (what, headers, content, status, words in the reason)
    ("oversized, with Content-Length", JSON, b'{"pad": "' + b"x" * MIB + b'"}', 413, "at most 1048576"),
    ("oversized, streamed without Content-Length", JSON, lambda: chunks(MIB + 10), 413, "larger than"),
    ("nested 33 deep", JSON, b"[" * 33 + b"]" * 33, 400, "nested deeper than 32"),
    ("nested 1000 deep, in an object", JSON, b'{"a":' * 1000 + b"1" + b"}" * 1000, 400, "nested deeper"),
    ("malformed JSON", JSON, b'{"publishRateInMsgs": 1', 422, "not valid JSON"),
    ("not UTF-8", JSON, b'{"a": "\xff\xfe\xfa"}', 422, "not valid JSON"),
    ("empty body", JSON, b"", 422, "body"),
    ("a JSON array", JSON, b"[1, 2]", 422, ""),
    ("a JSON string", JSON, b'"x"', 422, ""),
    ("JSON null", JSON, b"null", 422, ""),
    ("text/plain", {"content-type": "text/plain"}, b"{}", 422, "application/json"),
    ("a form", {"content-type": "application/x-www-form-urlencoded"}, b"a=1", 422, "application/json"),
    ("multipart", {"content-type": "multipart/form-data; boundary=b"}, b"--b--\r\n", 422, "application/json"),
    ("no content type", {}, b"{}", 422, ""),
]


@pytest.mark.integration
def test_every_body_is_guarded_and_a_refused_body_stores_nothing(start_cp: Any) -> None:
    cp: ControlPlane = start_cp()
    admin = cp.client(ADMIN)
    ops = body_operations(cp)
    failures = []
    for method, path, takes_json in ops:
        for what, headers, content, status, words in CASES:
            if not takes_json and status == 422:   # a text body's own rules: test_pulsar_admin_client.py
                continue
            r = admin.request(method, path, headers=headers, content=content() if callable(content) else content)
            try:
                reason = r.json()["reason"]
            except (ValueError, KeyError, TypeError):
                reason = None
            if r.status_code != status or reason is None or words not in reason:
                failures.append(f"{method} {path}, {what}: {r.status_code} {r.text[:200]!r} (expected {status})")
        for length in ("abc", "-1", "1e3"):
            code, body = raw(cp, method, path, {"Authorization": f"Bearer {ADMIN}", **JSON,
                                                "Content-Length": length}, b"{}")
            if code != 400:
                failures.append(f"{method} {path}, Content-Length {length}: {code} {body[:200]!r}")
    assert not failures, "\n".join(failures)
    print(f"\nGUARDS {len(ops)} operations x {len(CASES) + 3} bad bodies refused")
    # nothing of it was stored, audited or taken for a participant
    assert admin.get("/healthz").json()["policyVersion"] == 1
    assert admin.get("/admin/v2/audit").json()["total"] == 0
    assert admin.get("/v1/state/participants").json()["participants"] == []
    # out-of-range query values are refused too (an offset beyond SQLite's integers was a 500, found by fuzzing)
    for params in ({"offset": 10**30}, {"offset": -1}, {"limit": 10**30}, {"limit": "x"}):
        r = admin.get("/admin/v2/audit", params=params)
        assert r.status_code == 422 and r.json()["reason"], (params, r.status_code, r.text)
    # and the server is fine: a good change still goes through
    assert admin.put("/admin/v2/resourcegroups/after", json={"publishRateInMsgs": 5}).status_code == 201


# --- start-up errors ---------------------------------------------------------------------------------------------

def _run_all(commands: list[tuple[str, list[str], dict[str, str]]], timeout_s: float = 30) -> dict[str, Any]:
    """Start every command at once (each is a fresh interpreter), then collect (returncode, stderr) by name."""
    procs = {name: subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True) for name, argv, env in commands}
    out = {}
    for name, p in procs.items():
        try:
            _, err = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        out[name] = (p.returncode, err)
    return out


CONTROLPLANE: list[tuple[list[str], dict[str, str], str]] = [
    # (flags, environment, what the message must say)
    (["--port", "70000"], {}, "--port must be a port number 1..65535, got 70000"),
    (["--port", "-1"], {}, "--port must be a port number 1..65535"),
    (["--bad"], {}, "unrecognized arguments: --bad"),
    (["--report-interval", "0.01"], {}, "--report-interval must be a number of seconds 0.05..3600"),
    (["--report-interval", "inf"], {}, "--report-interval must be a number of seconds 0.05..3600"),
    (["--log-level", "loud"], {}, "--log-level must be one of critical, error, warning, info, debug"),
    ([], {"THROTTLESCOPE_REPORT_INTERVAL_S": "abc"}, "THROTTLESCOPE_REPORT_INTERVAL_S must be a number of seconds"),
    ([], {"THROTTLESCOPE_REPORT_INTERVAL_S": "1e9"}, "THROTTLESCOPE_REPORT_INTERVAL_S must be a number of seconds"),
    ([], {"THROTTLESCOPE_OPEN_READS": "maybe"}, "THROTTLESCOPE_OPEN_READS must be one of 1/true/yes/on"),
    ([], {"THROTTLESCOPE_LOG_LEVEL": "loud"}, "THROTTLESCOPE_LOG_LEVEL must be one of"),
    ([], {"THROTTLESCOPE_HOST": "a b"}, "THROTTLESCOPE_HOST must be a host name or IP address"),
    ([], {"THROTTLESCOPE_PORT": "65536"}, "THROTTLESCOPE_PORT must be a port number 1..65535"),
    ([], {"THROTTLESCOPE_TOKEN": ADMIN}, "the admin token and the participant token must differ"),
    ([], {"THROTTLESCOPE_TOKEN": "has a space in it, too long"}, "THROTTLESCOPE_TOKEN must be printable ASCII"),
    ([], {"THROTTLESCOPE_METRICS_TOPIC_LABELS": "sometimes"}, "THROTTLESCOPE_METRICS_TOPIC_LABELS must be one of 1/"),
]


@pytest.mark.integration
def test_control_plane_settings_out_of_range_exit_non_zero_naming_the_setting(tmp_path: Path) -> None:
    commands = []
    for i, (flags, env, _) in enumerate(CONTROLPLANE):
        argv = [sys.executable, "-m", "controlplane", "--data-dir", str(tmp_path / f"d{i}")]
        if "THROTTLESCOPE_HOST" not in env:
            argv += ["--host", "127.0.0.1"]
        if "--port" not in flags and "THROTTLESCOPE_PORT" not in env:
            argv += ["--port", str(free_port())]
        base = {"THROTTLESCOPE_ADMIN_TOKEN": ADMIN} if "THROTTLESCOPE_TOKEN" in env else {
            "THROTTLESCOPE_ADMIN_TOKEN": ADMIN, "THROTTLESCOPE_TOKEN": PARTICIPANT}
        commands.append((str(i), argv + flags, clean_env(**base, **env)))
    (tmp_path / "a-file").write_text("not a directory")
    commands.append(("file as data dir", [sys.executable, "-m", "controlplane", "--port", str(free_port()),
                                          "--data-dir", str(tmp_path / "a-file" / "data")], clean_env()))
    broken = tmp_path / "broken"
    broken.mkdir(mode=0o700)
    (broken / "throttlescope.db").write_bytes(b"this is not an SQLite database" * 100)
    commands.append(("corrupt store", [sys.executable, "-m", "controlplane", "--port", str(free_port()),
                                       "--data-dir", str(broken)],
                     clean_env(THROTTLESCOPE_ADMIN_TOKEN=ADMIN, THROTTLESCOPE_TOKEN=PARTICIPANT)))
    results = _run_all(commands)
    expected = {str(i): needle for i, (_, _, needle) in enumerate(CONTROLPLANE)}
    expected["file as data dir"] = "cannot create the data directory"
    expected["corrupt store"] = "cannot open"
    failures = []
    for name, needle in expected.items():
        code, err = results[name]
        if code != 2 or needle not in err or "Traceback" in err:
            failures.append(f"{name}: exit {code}, stderr {err[-600:]!r}; expected exit 2 and {needle!r}")
    assert not failures, "\n".join(failures)


PARTICIPANT_ENV = [
    ({"THROTTLESCOPE_REPORT_INTERVAL_S": "abc"}, "THROTTLESCOPE_REPORT_INTERVAL_S must be a number of seconds "
                                                 "0.05..3600, got 'abc'"),
    ({"THROTTLESCOPE_REPORT_INTERVAL_S": "0"}, "THROTTLESCOPE_REPORT_INTERVAL_S must be a number of seconds"),
    ({"THROTTLESCOPE_URL": "ftp://cp:8000"}, "THROTTLESCOPE_URL must be the control plane's base URL"),
    ({"THROTTLESCOPE_URL": "http://cp:99999"}, "THROTTLESCOPE_URL has an invalid port"),
    ({"THROTTLESCOPE_REPORT_TOLERANCE_PCT": "150"}, "THROTTLESCOPE_REPORT_TOLERANCE_PCT must be a percentage 0..100"),
    ({"THROTTLESCOPE_REPORT_MAX_ROUNDS": "0"}, "THROTTLESCOPE_REPORT_MAX_ROUNDS must be a whole number of reports"),
    ({"THROTTLESCOPE_BACKOFF_MAX_S": "-1"}, "THROTTLESCOPE_BACKOFF_MAX_S must be a number of seconds"),
    ({"THROTTLESCOPE_TOKEN": "two words"}, "THROTTLESCOPE_TOKEN must be printable ASCII without spaces"),
]
COLLECTORS_CLI = [
    (["publish", "--bad"], "unrecognized arguments: --bad"),
    (["publish", "--rows-per-batch", "0"], "--rows-per-batch: must be a whole number > 0"),
    (["publish", "--duration-s", "-5"], "--duration-s: must be a number > 0"),
    (["dispatch", "--backlog", "b", "--permits", "x"], "--permits: not a whole number"),
]


@pytest.mark.integration
def test_participant_environment_and_job_flags_out_of_range_exit_non_zero_naming_them(tmp_path: Path) -> None:
    spec = json.dumps({"topic": "acme/web/clicks", "phases": [[0, 10]], "duration": 0.5,
                       "out": str(tmp_path / "out.jsonl")})
    commands = [(f"env {i}", [sys.executable, "-m", "tests.collectors.participant_proc", spec],
                 clean_env(**{"THROTTLESCOPE_URL": "http://127.0.0.1:9", **env}))
                for i, (env, _) in enumerate(PARTICIPANT_ENV)]
    commands += [(f"cli {i}", [sys.executable, "-m", "collectors", *argv], clean_env())
                 for i, (argv, _) in enumerate(COLLECTORS_CLI)]
    results = _run_all(commands)
    failures = []
    for i, (_, needle) in enumerate(PARTICIPANT_ENV):
        code, err = results[f"env {i}"]
        # a library raises (the first participant() of the process fails loudly): the traceback ends in the message
        if code == 0 or f"ConfigError: {needle}" not in err:
            failures.append(f"participant env {i}: exit {code}, {err[-500:]!r}; expected {needle!r}")
    for i, (_, needle) in enumerate(COLLECTORS_CLI):
        code, err = results[f"cli {i}"]
        if code != 2 or needle not in err or "Traceback" in err:
            failures.append(f"collectors cli {i}: exit {code}, {err[-500:]!r}; expected exit 2 and {needle!r}")
    assert not failures, "\n".join(failures)
