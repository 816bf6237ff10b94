"""Where the dashboard finds the control plane, how people sign in, and Prometheus: environment first, then the
data dir.

How and why
-----------
The dashboard runs beside the control plane (``make run``) or anywhere that can reach it. It reads:

- ``THROTTLESCOPE_URL`` (default ``http://127.0.0.1:8000``), the control plane;
- ``THROTTLESCOPE_DASHBOARD_AUTH``: how people sign in (``signin.py``): ``local`` (single-user: everyone who opens
  the page acts as the super-user ``admin``, with the admin token below; only on a loopback address), ``token``
  (each person signs in with their principal's token), ``oidc`` (Streamlit's ``st.login`` with the identity
  provider of ``.streamlit/secrets.toml``; the dashboard then acts for them as a proxy principal), or ``auto``
  (the default: ``oidc`` when an identity provider is configured, else ``local`` when the admin token is at hand,
  else ``token``);
- ``THROTTLESCOPE_ADMIN_TOKEN``, else the ``admin.token`` file the control plane writes under
  ``THROTTLESCOPE_DATA_DIR`` (default ``./data``): the single-user mode's credentials;
- ``THROTTLESCOPE_DASHBOARD_TOKEN``: the token of the dashboard's proxy principal, for OIDC sign-in;
- ``THROTTLESCOPE_DASHBOARD_OIDC_CLAIM`` (default ``email``): the identity claim that names the principal;
- ``PROMETHEUS_URL`` (optional): history from Prometheus instead of the control plane's 15 in-memory minutes;
- ``THROTTLESCOPE_DASHBOARD_REFRESH`` (seconds, default 2): how often the live parts refresh.

Nothing here imports Streamlit, so a notebook can build the same ``Config`` and use ``dashboard.figures`` with it.
The variables are read as the other processes read theirs (``protocol.settings``); a refresh period that is not a
number of seconds 0.5..3600 falls back to the default rather than stopping the dashboard.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from protocol.settings import EnvSettings

__all__ = ["Config", "load_config", "DEFAULT_URL", "DEFAULT_REFRESH_S", "REFRESH_CHOICES", "AUTH_MODES"]

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_REFRESH_S = 2.0
REFRESH_CHOICES = (1.0, 2.0, 5.0, 10.0, 30.0)
AUTH_MODES = ("auto", "local", "token", "oidc")


@dataclass(frozen=True)
class Config:
    url: str = DEFAULT_URL
    admin_token: str | None = field(default=None, repr=False)
    prometheus_url: str | None = None
    data_dir: Path = Path("./data")
    refresh_s: float = DEFAULT_REFRESH_S
    admin_token_source: str = "none"   # "env", "file" or "none": told to the user, never the token itself
    auth: str = "auto"                 # one of AUTH_MODES (anything else is shown as an error by signin.py)
    proxy_token: str | None = field(default=None, repr=False)
    oidc_claim: str = "email"


def _read_token(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


def _refresh(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return DEFAULT_REFRESH_S
    return number if math.isfinite(number) and 0.5 <= number <= 3600 else DEFAULT_REFRESH_S


def _base_url(value: Any) -> str | None:
    # (settings validate their defaults too: None stays None, not "None")
    return None if value is None else str(value).strip().rstrip("/") or None


class _Variables(EnvSettings):
    """The dashboard's variables as set (see the module essay)."""

    url: Annotated[str, BeforeValidator(_base_url)] = DEFAULT_URL
    admin_token: str | None = Field(None, repr=False)
    prometheus_url: Annotated[str | None, BeforeValidator(_base_url)] = Field(None, validation_alias="PROMETHEUS_URL")
    data_dir: Path = Path("./data")
    refresh_s: Annotated[float, BeforeValidator(_refresh)] = Field(
        DEFAULT_REFRESH_S, validation_alias="THROTTLESCOPE_DASHBOARD_REFRESH")
    auth: Annotated[str, BeforeValidator(lambda v: str(v).strip().lower())] = Field(
        "auto", validation_alias="THROTTLESCOPE_DASHBOARD_AUTH")
    proxy_token: str | None = Field(None, repr=False, validation_alias="THROTTLESCOPE_DASHBOARD_TOKEN")
    oidc_claim: Annotated[str, BeforeValidator(lambda v: str(v).strip())] = Field(
        "email", validation_alias="THROTTLESCOPE_DASHBOARD_OIDC_CLAIM")


def load_config(env: Mapping[str, str] | None = None) -> Config:
    """The dashboard's settings from ``env`` (default: the process environment); the admin token from the
    environment, else from the control plane's ``admin.token`` file in the data dir."""
    v = _Variables.from_env(env)
    admin, source = v.admin_token, "env"
    if admin is None:
        admin, source = _read_token(v.data_dir / "admin.token"), "file"
    if admin is None:
        source = "none"
    return Config(url=v.url, admin_token=admin, prometheus_url=v.prometheus_url or None, data_dir=v.data_dir,
                  refresh_s=v.refresh_s, admin_token_source=source, auth=v.auth, proxy_token=v.proxy_token,
                  oidc_claim=v.oidc_claim)
