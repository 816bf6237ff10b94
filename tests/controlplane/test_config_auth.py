"""Settings, the bootstrap tokens and the JSON depth scan, without a server (the access rule: test_access.py)."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from controlplane.app import create_app
from controlplane.auth import ADMIN_TOKEN_FILE, PARTICIPANT_TOKEN_FILE, Tokens, load_tokens
from controlplane.config import ConfigError, Settings, parse_settings
from controlplane.middleware import json_depth

pytestmark = pytest.mark.unit


def test_defaults() -> None:
    s = parse_settings([], env={})
    assert (s.host, s.port, s.data_dir, s.report_interval_s, s.open_reads) == (
        "127.0.0.1", 8000, Path("./data"), 1.0, False)


def test_env_then_flags_win() -> None:
    env = {"THROTTLESCOPE_HOST": "0.0.0.0", "THROTTLESCOPE_PORT": "9000", "THROTTLESCOPE_DATA_DIR": "/tmp/x",
           "THROTTLESCOPE_REPORT_INTERVAL_S": "0.5", "THROTTLESCOPE_OPEN_READS": "true"}
    s = parse_settings([], env=env)
    assert (s.host, s.port, s.data_dir, s.report_interval_s, s.open_reads) == (
        "0.0.0.0", 9000, Path("/tmp/x"), 0.5, True)
    s = parse_settings(["--host", "127.0.0.2", "--port", "9001", "--report-interval", "2"], env=env)
    assert (s.host, s.port, s.report_interval_s) == ("127.0.0.2", 9001, 2.0)
    assert s.stale_after_s == 4.0


def test_replica_settings() -> None:
    s = parse_settings([], env={})
    assert (s.redis_url, s.reuse_port) == (None, False)   # one process, its grants in memory: the default
    s = parse_settings(["--reuse-port"], env={"THROTTLESCOPE_REDIS_URL": "redis://127.0.0.1:6379/2"})
    assert (s.redis_url, s.reuse_port) == ("redis://127.0.0.1:6379/2", True)


def test_the_grant_asks_budget_is_a_setting_the_grant_book_keeps(tmp_path: Path) -> None:
    assert parse_settings([], env={}).grant_asks_per_s == 2000
    s = parse_settings(["--grant-asks", "500"], env={"THROTTLESCOPE_GRANT_ASKS_PER_S": "9000"})
    assert s.grant_asks_per_s == 500                                     # the flag over the environment
    s = parse_settings([], env={"THROTTLESCOPE_GRANT_ASKS_PER_S": "9000", "THROTTLESCOPE_DATA_DIR": str(tmp_path)})
    app = create_app(s, Tokens(admin="a" * 16, participant="p" * 16))
    assert app.state.ctx.grants.pace.budget_per_s == 9000


def test_the_reports_pace_settings_reach_the_pace(tmp_path: Path) -> None:
    s = parse_settings([], env={})
    assert (s.report_interval_most_s, s.report_cpu_share) == (30.0, 0.8)
    assert parse_settings(["--report-interval", "30"], env={}).report_interval_most_s == 30.0   # never shorter
    s = parse_settings(["--report-interval-max", "4"], env={"THROTTLESCOPE_REPORT_INTERVAL_MAX_S": "8",
                                                            "THROTTLESCOPE_REPORT_CPU_SHARE": "0.3",
                                                            "THROTTLESCOPE_DATA_DIR": str(tmp_path)})
    assert (s.report_interval_most_s, s.report_cpu_share) == (4.0, 0.3)
    pace = create_app(s, Tokens(admin="a" * 16, participant="p" * 16)).state.ctx.pace
    assert (pace.floor_s, pace.most_s, pace.cpu_share) == (1.0, 4.0, 0.3)


@pytest.mark.parametrize(("argv", "env", "needle"), [
    (["--port", "0"], {}, "--port must be a port number 1..65535"),
    (["--port", "70000"], {}, "1..65535"),
    ([], {"THROTTLESCOPE_PORT": "http"}, "THROTTLESCOPE_PORT must be an integer"),
    (["--report-interval", "0"], {}, "--report-interval must be a number of seconds 0.05..3600"),
    ([], {"THROTTLESCOPE_REPORT_INTERVAL_S": "nan"}, "THROTTLESCOPE_REPORT_INTERVAL_S"),
    ([], {"THROTTLESCOPE_OPEN_READS": "maybe"}, "THROTTLESCOPE_OPEN_READS must be one of"),
    (["--host", "a b"], {}, "--host must be a host name"),
    (["--log-level", "loud"], {}, "--log-level must be one of"),
    ([], {"THROTTLESCOPE_DATA_DIR": " "}, "THROTTLESCOPE_DATA_DIR must be a directory"),
    ([], {"THROTTLESCOPE_METRICS_TOPIC_LABELS": "maybe"},
     "THROTTLESCOPE_METRICS_TOPIC_LABELS must be one of 1/true/yes/on or 0/false/no/off, got 'maybe'"),
    ([], {"THROTTLESCOPE_ADMIN_TOKEN": "short"}, "THROTTLESCOPE_ADMIN_TOKEN must be 16..1024 characters long (got 5)"),
    ([], {"THROTTLESCOPE_TOKEN": "p" * 15 + " "}, "THROTTLESCOPE_TOKEN must be printable ASCII without spaces"),
    (["--redis-url", "localhost:6379"], {},
     "--redis-url must be a Redis URL (redis://..., rediss://..., unix://...), got 'localhost:6379'"),
    ([], {"THROTTLESCOPE_REUSE_PORT": "maybe"}, "THROTTLESCOPE_REUSE_PORT must be one of"),
    (["--reuse-port"], {}, "without --redis-url (THROTTLESCOPE_REDIS_URL) each would grant every shared limit whole"),
    (["--grant-asks", "99"], {}, "--grant-asks must be a number of asks a second 100..1e+06, got '99'"),
    ([], {"THROTTLESCOPE_GRANT_ASKS_PER_S": "lots"}, "THROTTLESCOPE_GRANT_ASKS_PER_S must be a number of asks a second"),
    (["--report-interval", "2", "--report-interval-max", "1"], {},
     "--report-interval-max (THROTTLESCOPE_REPORT_INTERVAL_MAX_S) must be at least --report-interval "
     "(THROTTLESCOPE_REPORT_INTERVAL_S, 2 s), got 1 s"),
    ([], {"THROTTLESCOPE_REPORT_INTERVAL_MAX_S": "0"},
     "THROTTLESCOPE_REPORT_INTERVAL_MAX_S must be a number of seconds"),
    (["--report-cpu-share", "0"], {}, "--report-cpu-share must be a fraction of a core 0.05..1, got '0'"),
])
def test_out_of_range_values_name_the_setting(argv: list[str], env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_settings(argv, env=env)
    assert needle in str(e.value)


def test_tokens_generated_once_with_mode_0600(tmp_path: Path) -> None:
    err = io.StringIO()
    t1 = load_tokens(tmp_path, err=err)
    assert t1.admin != t1.participant and len(t1.admin) >= 32
    for name in ("admin.token", "participant.token"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    printed = err.getvalue()
    assert printed.count(t1.admin) == 1 and printed.count(t1.participant) == 1
    err2 = io.StringIO()
    t2 = load_tokens(tmp_path, err=err2)
    assert (t2.admin, t2.participant) == (t1.admin, t1.participant)
    assert t1.admin not in err2.getvalue() and t1.participant not in err2.getvalue()
    assert t1.admin not in repr(t1)


def test_loose_token_file_is_tightened(tmp_path: Path) -> None:
    (tmp_path / "admin.token").write_text("a" * 20 + "\n")
    (tmp_path / "admin.token").chmod(0o644)
    tokens = load_tokens(tmp_path, participant="p" * 20, err=io.StringIO())
    assert tokens.admin == "a" * 20
    assert stat.S_IMODE((tmp_path / "admin.token").stat().st_mode) == 0o600


def test_tokens_and_topic_labels_are_settings(tmp_path: Path) -> None:
    s = parse_settings([], env={})
    assert (s.admin_token, s.token, s.metrics_topic_labels) == (None, None, True)
    env = {"THROTTLESCOPE_ADMIN_TOKEN": "a" * 16, "THROTTLESCOPE_TOKEN": " ",   # blank: not set (the file then)
           "THROTTLESCOPE_METRICS_TOPIC_LABELS": "off"}
    s = parse_settings([], env=env)
    assert (s.admin_token, s.token, s.metrics_topic_labels) == ("a" * 16, None, False)
    assert "a" * 16 not in repr(s)
    with pytest.raises(ConfigError) as e:
        parse_settings([], env={"THROTTLESCOPE_ADMIN_TOKEN": "secret-but-short"[:10]})
    assert "secret-but" not in str(e.value)   # a bad token's message never shows it


def test_given_tokens_are_used_and_must_differ(tmp_path: Path) -> None:
    tokens = load_tokens(tmp_path, admin="a" * 16, participant="p" * 16)
    assert (tokens.admin, tokens.participant) == ("a" * 16, "p" * 16)
    with pytest.raises(ConfigError, match="must differ"):
        load_tokens(tmp_path, admin="x" * 16, participant="x" * 16)
    assert not (tmp_path / "admin.token").exists()


def test_a_bad_token_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "admin.token").write_text("short\n")
    with pytest.raises(ConfigError, match=r"admin.token must be 16..1024 characters long \(got 5\)"):
        load_tokens(tmp_path, participant="p" * 16, err=io.StringIO())


def test_json_depth() -> None:
    assert json_depth(b'{"a": [1, {"b": 2}]}') == 3
    assert json_depth(b'{"a": "[[[[[[[[[[{{{{{"}') == 1
    assert json_depth(b'{"a": "\\"[[[["}') == 1
    assert json_depth(b"[" * 40 + b"]" * 40) == 40
    assert json_depth(b"") == 0


def test_json_depth_never_counts_less_than_a_parser_would_reach() -> None:
    # brackets that never close (or close first) are not JSON: counted at least as deep as their opening runs
    assert json_depth(b"[" * 40) == 40
    assert json_depth(b'{"a": [[[' + b"1" * 10) == 4
    assert json_depth(b"][" * 3 + b"[[") >= 2
    # the guard's question: deeper than ``most`` or not -- asked of a deep body, it stops soon after ``most``
    deep = b"[" * 200_000 + b"]" * 200_000
    assert json_depth(deep, most=32) > 32
    assert json_depth(b"[" * 32 + b"]" * 32, most=32) == 32


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_TEXT = st.text(alphabet='ab[]{}"\\:,é', max_size=8)   # strings full of what could fool a bracket counter
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | _TEXT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=30)


@given(_JSON, st.booleans())
def test_json_depth_is_the_real_nesting(value: object, ascii_only: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert json_depth(body) == _depth(value)
    assert (json_depth(body, most=2) > 2) == (_depth(value) > 2)


def test_settings_is_frozen() -> None:
    with pytest.raises(ValidationError, match="frozen"):
        Settings().port = 1  # type: ignore[misc]


def test_replicas_starting_together_over_one_data_directory_share_one_pair_of_tokens(tmp_path: Path) -> None:

    import threading
    got: list[object] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        got.append(load_tokens(tmp_path, err=io.StringIO()))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len(set(got)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([ADMIN_TOKEN_FILE, PARTICIPANT_TOKEN_FILE])


def test_the_guard_the_report_timer_and_the_fast_path_stand_in_front_of_fastapis_own_layers(tmp_path: Path) -> None:
    from controlplane.api_metrics import ReportTimer
    from controlplane.api_participant import ParticipantFastPath
    from controlplane.middleware import GuardMiddleware

    app = create_app(parse_settings([], env={"THROTTLESCOPE_DATA_DIR": str(tmp_path)}),
                     Tokens(admin="a" * 16, participant="p" * 16))
    layer, order = app.build_middleware_stack(), []
    while hasattr(layer, "app") and len(order) < 4:
        order.append(type(layer).__name__)
        layer = layer.app
    assert order[:3] == [GuardMiddleware.__name__, ReportTimer.__name__, ParticipantFastPath.__name__]
    assert order[3] == "ServerErrorMiddleware"          # what the fast path passes on goes through FastAPI's layers
    assert not app._native_telemetry.enabled()          # no OpenTelemetry look-ups on every request
