"""Settings of the control plane: command-line flags over environment variables over defaults.

``python -m controlplane --host 127.0.0.1 --port 8000 --data-dir ./data`` (the defaults). Environment:
THROTTLESCOPE_HOST, THROTTLESCOPE_PORT, THROTTLESCOPE_DATA_DIR, THROTTLESCOPE_REPORT_INTERVAL_S,
THROTTLESCOPE_OPEN_READS, THROTTLESCOPE_LOG_LEVEL; tokens come from THROTTLESCOPE_ADMIN_TOKEN and THROTTLESCOPE_TOKEN
(see auth.py). A value out of range stops the start with a message naming the flag or variable and what is allowed.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 3600.0
MAX_BODY_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 32
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


class ConfigError(ValueError):
    """A setting out of range; the message names it and says what is allowed."""


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path("./data")
    report_interval_s: float = 1.0
    open_reads: bool = False
    log_level: str = "info"
    max_body_bytes: int = MAX_BODY_BYTES
    max_json_depth: int = MAX_JSON_DEPTH

    @property
    def stale_after_s(self) -> float:
        """Participants not heard from for this long are removed; reports older than this are ignored."""
        return 2 * self.report_interval_s


def _port(text: str, source: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"{source} must be an integer port number 1..65535, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise ConfigError(f"{source} must be a port number 1..65535, got {port}")
    return port


def _interval(text: str, source: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and MIN_INTERVAL_S <= value <= MAX_INTERVAL_S):
        raise ConfigError(
            f"{source} must be a number of seconds {MIN_INTERVAL_S:g}..{MAX_INTERVAL_S:g}, got {text!r}")
    return value


def _bool(text: str, source: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{source} must be one of 1/true/yes/on or 0/false/no/off, got {text!r}")


def _host(text: str, source: str) -> str:
    if not text or any(c.isspace() for c in text) or len(text) > 253:
        raise ConfigError(f"{source} must be a host name or IP address, got {text!r}")
    return text


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
    p.add_argument("--open-reads", action="store_const", const="1",
                   help="serve read endpoints without a token (env THROTTLESCOPE_OPEN_READS=1)")
    p.add_argument("--log-level", help=f"one of {', '.join(LOG_LEVELS)} (default info; env THROTTLESCOPE_LOG_LEVEL)")
    return p


def parse_settings(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Flags win over environment variables, which win over defaults. Raises ConfigError."""
    env = os.environ if env is None else env
    args = _parser().parse_args(argv)
    defaults = Settings()

    def pick(flag: str | None, var: str, flag_name: str | None = None) -> tuple[str | None, str]:
        if flag is not None:
            return flag, flag_name or "--" + var.removeprefix("THROTTLESCOPE_").lower().replace("_", "-")
        return env.get(var), var

    host, src = pick(args.host, "THROTTLESCOPE_HOST")
    port, psrc = pick(args.port, "THROTTLESCOPE_PORT")
    data_dir, dsrc = pick(args.data_dir, "THROTTLESCOPE_DATA_DIR")
    interval, isrc = pick(args.report_interval, "THROTTLESCOPE_REPORT_INTERVAL_S", "--report-interval")
    open_reads, osrc = pick(args.open_reads, "THROTTLESCOPE_OPEN_READS")
    level, lsrc = pick(args.log_level, "THROTTLESCOPE_LOG_LEVEL")
    if data_dir is not None and not data_dir.strip():
        raise ConfigError(f"{dsrc} must be a directory path, got an empty string")
    if level is not None and level.lower() not in LOG_LEVELS:
        raise ConfigError(f"{lsrc} must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    return Settings(
        host=_host(host, src) if host is not None else defaults.host,
        port=_port(port, psrc) if port is not None else defaults.port,
        data_dir=Path(data_dir) if data_dir is not None else defaults.data_dir,
        report_interval_s=_interval(interval, isrc) if interval is not None else defaults.report_interval_s,
        open_reads=_bool(open_reads, osrc) if open_reads is not None else defaults.open_reads,
        log_level=level.lower() if level is not None else defaults.log_level,
    )


def package_version() -> str:
    try:
        return metadata.version("throttlescope")
    except metadata.PackageNotFoundError:
        return "0+unknown"
