"""Where the dashboard finds the control plane, its tokens and Prometheus: environment first, then the data dir.

How and why
-----------
The dashboard runs beside the control plane (``make run``) or anywhere that can reach it. It reads:

- ``THROTTLESCOPE_URL`` (default ``http://127.0.0.1:8000``), the control plane;
- ``THROTTLESCOPE_ADMIN_TOKEN``, else the ``admin.token`` file the control plane writes under
  ``THROTTLESCOPE_DATA_DIR`` (default ``./data``): edits need it, and it reads everything too;
- ``THROTTLESCOPE_TOKEN``, else ``participant.token`` there: enough for reads when there is no admin token;
- ``PROMETHEUS_URL`` (optional): history from Prometheus instead of the control plane's 15 in-memory minutes;
- ``THROTTLESCOPE_DASHBOARD_REFRESH`` (seconds, default 2): how often the live parts refresh.

A token missing here is asked for in the sidebar (kept in the session only). Nothing here imports Streamlit, so
a notebook can build the same ``Config`` and use ``dashboard.figures`` with it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Config", "load_config", "DEFAULT_URL", "DEFAULT_REFRESH_S", "REFRESH_CHOICES"]

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_REFRESH_S = 2.0
REFRESH_CHOICES = (1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class Config:
    url: str = DEFAULT_URL
    admin_token: str | None = field(default=None, repr=False)
    read_token: str | None = field(default=None, repr=False)
    prometheus_url: str | None = None
    data_dir: Path = Path("./data")
    refresh_s: float = DEFAULT_REFRESH_S
    admin_token_source: str = "none"   # "env", "file" or "none": told to the user, never the token itself


def _read_token(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


def _refresh(text: str | None) -> float:
    try:
        value = float(text) if text else DEFAULT_REFRESH_S
    except ValueError:
        return DEFAULT_REFRESH_S
    return value if math.isfinite(value) and 0.5 <= value <= 3600 else DEFAULT_REFRESH_S


def load_config(env: Mapping[str, str] | None = None) -> Config:
    env = os.environ if env is None else env
    data_dir = Path(env.get("THROTTLESCOPE_DATA_DIR") or "./data")
    admin, source = env.get("THROTTLESCOPE_ADMIN_TOKEN") or None, "env"
    if admin is None:
        admin, source = _read_token(data_dir / "admin.token"), "file"
    if admin is None:
        source = "none"
    reader = env.get("THROTTLESCOPE_TOKEN") or _read_token(data_dir / "participant.token")
    return Config(url=(env.get("THROTTLESCOPE_URL") or DEFAULT_URL).rstrip("/"), admin_token=admin,
                  read_token=admin or reader, prometheus_url=(env.get("PROMETHEUS_URL") or "").rstrip("/") or None,
                  data_dir=data_dir, refresh_s=_refresh(env.get("THROTTLESCOPE_DASHBOARD_REFRESH")),
                  admin_token_source=source)
