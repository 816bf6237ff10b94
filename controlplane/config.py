"""Settings of the control plane: command-line flags over environment variables over defaults.

``python -m controlplane --host 127.0.0.1 --port 8000 --data-dir ./data`` (the defaults). Environment:
THROTTLESCOPE_HOST, THROTTLESCOPE_PORT, THROTTLESCOPE_DATA_DIR, THROTTLESCOPE_REPORT_INTERVAL_S,
THROTTLESCOPE_OPEN_READS, THROTTLESCOPE_LOG_LEVEL, THROTTLESCOPE_METRICS_TOPIC_LABELS, THROTTLESCOPE_REDIS_URL and
THROTTLESCOPE_REUSE_PORT (replicas: see docs/architecture.md, "Several replicas"), THROTTLESCOPE_GRANT_ASKS_PER_S,
THROTTLESCOPE_REPORT_INTERVAL_MAX_S and THROTTLESCOPE_REPORT_CPU_SHARE (``controlplane.report_pace``); the bootstrap
tokens
THROTTLESCOPE_ADMIN_TOKEN and THROTTLESCOPE_TOKEN (not set: auth.py reads or makes them in the data directory).
A value out of range stops the start with a message naming the flag or variable and what is allowed (a token's
message never shows the token).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from controlplane.ask_pace import ASKS_BUDGET_PER_S
from protocol import MAX_ASKS_PER_S
from protocol.settings import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    BearerToken,
    ConfigError,
    EnvSettings,
    IntervalSeconds,
    between,
    switch,
)

__all__ = ["Settings", "ConfigError", "parse_settings", "package_version", "MIN_INTERVAL_S", "MAX_INTERVAL_S",
           "MAX_BODY_BYTES", "MAX_INFLATED_BYTES", "MAX_JSON_DEPTH", "LOG_LEVELS"]

MAX_BODY_BYTES = 1024 * 1024
MAX_INFLATED_BYTES = 32 * 1024 * 1024   # a gzip body inflated (a report of 5,000 limits is ~3 MB of JSON)
MAX_JSON_DEPTH = 32
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
MAX_GRANT_ASKS_PER_S = 1e6
# the longest interval the reports are stretched to, unless told (or the interval is): Pulsar's brokers report
# resource-group usage every 60 s by default; at 10 s, 3,000 participants of 100 limits needed more than a core
MOST_REPORT_INTERVAL_S = 30.0
REPORT_CPU_SHARE = 0.8          # of a core: beyond it, the reports are told to come less often


def _port(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"must be an integer port number 1..65535, got {value!r}")
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be an integer port number 1..65535, got {value!r}") from None
    if not 1 <= port <= 65535:
        raise ValueError(f"must be a port number 1..65535, got {port}")
    return port


def _host(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() for c in text) or len(text) > 253:
        raise ValueError(f"must be a host name or IP address, got {text!r}")
    return text


def _directory(value: Any) -> Path:
    if isinstance(value, str) and not value.strip():
        raise ValueError("must be a directory path, got an empty string")
    return Path(value)


def _redis_url(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    if not text.startswith(REDIS_SCHEMES) or any(c.isspace() for c in text):
        raise ValueError(f"must be a Redis URL ({', '.join(s + '...' for s in REDIS_SCHEMES)}), got {text!r}")
    return text


def _log_level(value: Any) -> str:
    if str(value).lower() not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return str(value).lower()


class Settings(EnvSettings):
    blank_is_unset = False   # THROTTLESCOPE_HOST= is a mistake to name, not "the default"

    host: Annotated[str, BeforeValidator(_host)] = "127.0.0.1"
    port: Annotated[int, BeforeValidator(_port)] = 8000
    data_dir: Annotated[Path, BeforeValidator(_directory)] = Path("./data")
    report_interval_s: IntervalSeconds = 1.0
    open_reads: switch() = False
    log_level: Annotated[str, BeforeValidator(_log_level)] = "info"
    # 0: every topic- and subscription-level name folded into name="*" in /metrics (large deployments)
    metrics_topic_labels: switch() = True
    admin_token: BearerToken = Field(None, repr=False)
    token: BearerToken = Field(None, repr=False)   # the participants'
    max_body_bytes: int = MAX_BODY_BYTES
    max_inflated_bytes: int = MAX_INFLATED_BYTES
    max_json_depth: int = MAX_JSON_DEPTH
    # replicas: the grant windows in this Redis (controlplane.grant_tables), and the reports passed between them
    # through it (controlplane.shared_reports); None: one process, everything in it
    redis_url: Annotated[str | None, BeforeValidator(_redis_url)] = None
    # bind with SO_REUSEPORT, so that several replicas on one host serve one address (the kernel spreads the
    # connections over them)
    reuse_port: switch() = False
    # the grant asks a second this process aims at over all its shared limits (controlplane.ask_pace)
    grant_asks_per_s: between(MAX_ASKS_PER_S, MAX_GRANT_ASKS_PER_S, "a number of asks a second") = ASKS_BUDGET_PER_S
    # the reports' pace (controlplane.report_pace): stretched up to this (None: 10 s, or the interval if longer) when
    # the reports would take more than report_cpu_share of a core (0.8: below it, a report's own CPU, not the
    # queue, is what its latency is made of; stretched, each report costs more: the slots it skipped are filled);
    # equal to report_interval_s: never stretched
    report_interval_max_s: IntervalSeconds | None = None
    report_cpu_share: between(0.05, 1.0, "a fraction of a core") = REPORT_CPU_SHARE

    @property
    def report_interval_most_s(self) -> float:
        """The longest interval the reports may be told."""
        if self.report_interval_max_s is not None:
            return self.report_interval_max_s
        return max(self.report_interval_s, MOST_REPORT_INTERVAL_S)

    @property
    def stale_after_s(self) -> float:
        """Participants not heard from for this long are removed; reports older than this are ignored."""
        return 2 * self.report_interval_s


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m controlplane",
        description="throttlescope control plane: Pulsar-shaped admin API, participant reports, dashboard state.")
    p.add_argument("--host", help="address to bind (default 127.0.0.1; env THROTTLESCOPE_HOST)")
    p.add_argument("--port", help="port to bind, 1..65535 (default 8000; env THROTTLESCOPE_PORT)")
    p.add_argument("--data-dir", help="directory for the SQLite store and token files "
                                      "(default ./data; env THROTTLESCOPE_DATA_DIR)")
    p.add_argument("--report-interval", metavar="SECONDS",
                   help=f"report interval told to participants, {MIN_INTERVAL_S:g}..{MAX_INTERVAL_S:g} s "
                        "(default 1; env THROTTLESCOPE_REPORT_INTERVAL_S); participants silent for twice this "
                        "are removed")
    p.add_argument("--report-interval-max", metavar="SECONDS",
                   help=f"the longest report interval told when reports would take more than --report-cpu-share of "
                        f"a core, --report-interval..{MAX_INTERVAL_S:g} s (default {MOST_REPORT_INTERVAL_S:g}, or "
                        "--report-interval if longer; env THROTTLESCOPE_REPORT_INTERVAL_MAX_S); equal to "
                        "--report-interval: never stretched")
    p.add_argument("--report-cpu-share", metavar="FRACTION",
                   help=f"the share of a core the reports may take before they are told to come less often, "
                        f"0.05..1 (default {REPORT_CPU_SHARE:g}; env THROTTLESCOPE_REPORT_CPU_SHARE)")
    p.add_argument("--open-reads", action="store_const", const="1",
                   help="serve read endpoints without a token (env THROTTLESCOPE_OPEN_READS=1)")
    p.add_argument("--log-level", help=f"one of {', '.join(LOG_LEVELS)} (default info; env THROTTLESCOPE_LOG_LEVEL)")
    p.add_argument("--redis-url", metavar="URL",
                   help="keep the shared limits' grants in this Redis and pass reports between replicas through it, "
                        "so that several replicas (with one data directory) serve as one (env "
                        "THROTTLESCOPE_REDIS_URL; default: in this process)")
    p.add_argument("--reuse-port", action="store_const", const="1",
                   help="bind with SO_REUSEPORT: several replicas on one host share --host:--port "
                        "(env THROTTLESCOPE_REUSE_PORT=1)")
    p.add_argument("--grant-asks", metavar="PER_SECOND",
                   help=f"grant asks a second this process aims at over all its shared limits, "
                        f"{MAX_ASKS_PER_S:g}..{MAX_GRANT_ASKS_PER_S:g} (default {ASKS_BUDGET_PER_S:g}; env "
                        "THROTTLESCOPE_GRANT_ASKS_PER_S); when it comes to fewer than 100 a busy limit, the participants "
                        "of each are granted longer chunks, asked for less often")
    return p


FLAGS = {"host": "--host", "port": "--port", "data_dir": "--data-dir", "report_interval_s": "--report-interval",
         "open_reads": "--open-reads", "log_level": "--log-level", "redis_url": "--redis-url",
         "reuse_port": "--reuse-port", "grant_asks_per_s": "--grant-asks",
         "report_interval_max_s": "--report-interval-max", "report_cpu_share": "--report-cpu-share"}


def parse_settings(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Flags win over environment variables, which win over defaults. Raises ConfigError."""
    settings = Settings.from_flags(_parser().parse_args(argv), FLAGS, env)
    if settings.reuse_port and not settings.redis_url:
        raise ConfigError("--reuse-port (THROTTLESCOPE_REUSE_PORT) lets other control-plane processes serve the "
                          "same port; without --redis-url (THROTTLESCOPE_REDIS_URL) each would grant every shared "
                          "limit whole. Give both, or neither")
    if settings.report_interval_max_s is not None and settings.report_interval_max_s < settings.report_interval_s:
        raise ConfigError(f"--report-interval-max (THROTTLESCOPE_REPORT_INTERVAL_MAX_S) must be at least "
                          f"--report-interval (THROTTLESCOPE_REPORT_INTERVAL_S, {settings.report_interval_s:g} s), "
                          f"got {settings.report_interval_max_s:g} s")
    return settings


def package_version() -> str:
    try:
        return metadata.version("throttlescope")
    except metadata.PackageNotFoundError:
        return "0+unknown"
