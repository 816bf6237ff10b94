"""Who is using the dashboard: single-user local mode, a token sign-in, or OpenID Connect with ``st.login``.

How and why
-----------
Every call the dashboard makes carries the credentials of the person using it, so the control plane applies that
principal's rights and the audit log names them; the dashboard itself decides nothing (editors ask the control
plane, ``data.refusal``, whether a call would be allowed). ``session()`` resolves the mode once per run from the
configuration (``config.py``) and returns the connection to use and who it is (``/v1/whoami``):

- ``local`` -- single-user mode, the default of ``make run``: everyone who opens the page acts as the super-user
  ``admin``, with the data dir's admin token. It is allowed only while Streamlit listens on a loopback address
  (``--server.address 127.0.0.1``, as the Procfile starts it), so it trusts exactly those who can reach that
  address: the users of this machine, and anything that forwards to it (an SSH tunnel, a reverse proxy). The
  sidebar says so on every page.
- ``token`` -- each person signs in with their own principal's token (``python -m controlplane principals
  create ...``). It is kept in this browser session's state only, never in a cookie, a file or a log.
- ``oidc`` -- Streamlit's built-in OIDC sign-in (``st.login``, configured by the ``[auth]`` section of
  ``.streamlit/secrets.toml``). The identity claim ``THROTTLESCOPE_DASHBOARD_OIDC_CLAIM`` (default ``email``) names
  the principal; the dashboard calls the control plane with its own proxy principal's token
  (``THROTTLESCOPE_DASHBOARD_TOKEN``) and that name in ``X-Original-Principal``, as a Pulsar proxy does, and the
  control plane applies the named principal's rights.

A mode that cannot work (local mode on a public address, OIDC without a proxy token) says why and falls back to the
token sign-in, never to more rights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from dashboard import data
from dashboard.config import AUTH_MODES, Config, load_config

__all__ = ["Session", "session", "sidebar", "describe", "LOOPBACK"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_INPUT, SIGNED_IN = "signin.token", "signin.signed_in"
CREATE = "python -m controlplane principals create NAME --role viewer|tenant-admin|super-user [--tenant TENANT]"


@dataclass(frozen=True)
class Session:
    mode: str                       # "local", "token" or "oidc"
    conn: data.Conn                 # the signed-in principal's credentials (no token: nobody signed in)
    who: dict[str, Any] | None      # /v1/whoami, None while nobody is signed in (or it was refused)
    note: str | None = None         # why the configured mode could not be used, or why sign-in failed


def describe(who: dict[str, Any]) -> str:
    """``acme-admin (tenant admin of acme)``: the name and what the role may do."""
    role = who["role"]
    what = (f"tenant admin of {', '.join(who['adminOf'])}" if role == "tenant-admin" and who["adminOf"]
            else "tenant admin of no tenant yet" if role == "tenant-admin" else role)
    via = f", through {who['via']}" if who.get("via") else ""
    return f"{who['name']} ({what}{via})"


def _oidc_configured() -> bool:
    try:
        return "auth" in st.secrets
    except Exception:  # noqa: BLE001 - a missing or unreadable secrets.toml: not configured
        return False


def _loopback() -> bool:
    address = str(st.get_option("server.address") or "")
    return address in LOOPBACK or address.startswith("127.")


def _mode(cfg: Config) -> tuple[str, str | None]:
    """The mode to use, and why the configured one could not be (None when it can)."""
    if cfg.auth not in AUTH_MODES:
        return "token", f"THROTTLESCOPE_DASHBOARD_AUTH must be one of {', '.join(AUTH_MODES)}, not {cfg.auth!r}"
    wanted = cfg.auth if cfg.auth != "auto" else (
        "oidc" if _oidc_configured() else "local" if cfg.admin_token else "token")
    if wanted == "oidc" and not _oidc_configured():
        return "token", "OIDC sign-in needs an [auth] section in .streamlit/secrets.toml (see the README)"
    if wanted == "oidc" and not cfg.proxy_token:
        return "token", ("OIDC sign-in needs THROTTLESCOPE_DASHBOARD_TOKEN, the token of a proxy principal "
                         "(python -m controlplane principals create dashboard --role proxy)")
    if wanted == "local" and not cfg.admin_token:
        return "token", (f"single-user mode needs the admin token: THROTTLESCOPE_ADMIN_TOKEN, or admin.token in "
                         f"THROTTLESCOPE_DATA_DIR ({cfg.data_dir})")
    if wanted == "local" and not _loopback():
        return "token", ("single-user mode is only for a dashboard that listens on a loopback address "
                         "(--server.address 127.0.0.1): anyone who can open it acts as the super-user")
    return wanted, None


def _identify(conn: data.Conn) -> tuple[dict[str, Any] | None, str | None]:
    if conn.token is None:
        return None, None
    who = data.whoami(conn)
    if isinstance(who, data.Unavailable):
        return None, None if who.down else who.reason
    return who, None


def session() -> Session:
    cfg = load_config()
    mode, note = _mode(cfg)
    if mode == "local":
        conn = data.Conn(cfg.url, cfg.admin_token, cfg.prometheus_url)
        who, refused = _identify(conn)
        if refused is None:
            return Session("local", conn, who)
        mode, note = "token", f"the data dir's admin token was refused ({refused}); sign in with a token"
    if mode == "oidc":
        name = str(st.user.get(cfg.oidc_claim) or "") if st.user.is_logged_in else ""
        conn = data.Conn(cfg.url, cfg.proxy_token if name else None, cfg.prometheus_url, name or None)
        who, refused = _identify(conn)
        return Session("oidc", conn, who, refused and f"signed in as {name!r}, but {refused}")
    token = st.session_state.get(SIGNED_IN)
    conn = data.Conn(cfg.url, token, cfg.prometheus_url)
    who, refused = _identify(conn)
    if refused is not None:                # revoked since: signed out
        st.session_state.pop(SIGNED_IN, None)
        return Session("token", data.Conn(cfg.url, None, cfg.prometheus_url), None, refused)
    return Session("token", conn, who, note)


def _sign_in_with_token(url: str) -> None:
    token = (st.session_state.get(TOKEN_INPUT) or "").strip()
    if not token:
        return
    who = data.whoami(data.Conn(url, token))
    if isinstance(who, data.Unavailable):
        st.session_state["signin.error"] = who.reason
        return
    st.session_state[SIGNED_IN] = token
    st.session_state[TOKEN_INPUT] = ""
    st.session_state.pop("signin.error", None)


def sidebar(s: Session) -> None:
    """The sign-in part of the sidebar: the mode, who is signed in, and the way to sign in or out."""
    if s.note:
        st.warning(s.note, icon=":material/warning:")
    if s.mode == "local":
        source = "the environment" if load_config().admin_token_source == "env" else "the data dir"
        st.info(f"**Single-user local mode.** Everyone who can open this page on this machine acts as "
                f"{describe(s.who) if s.who else 'the super-user admin'}, with the admin token from {source}. For "
                "a team, see the README's security section (token or OIDC sign-in).", icon=":material/person:")
        return
    if s.who is not None:
        st.success(f"Signed in as {describe(s.who)}", icon=":material/verified_user:")
        if s.mode == "oidc":
            st.button("Sign out", key="signin.logout", on_click=st.logout, icon=":material/logout:")
        elif st.button("Sign out", key="signin.logout", icon=":material/logout:"):
            st.session_state.pop(SIGNED_IN, None)
            data.clear_cache()
            st.rerun()
        return
    if s.mode == "oidc":
        if not st.user.is_logged_in:
            st.button("Sign in", key="signin.login", on_click=st.login, type="primary", icon=":material/login:")
        name = "YOUR-" + load_config().oidc_claim.upper()
        st.caption(f"A super-user gives you a role with: {CREATE.replace('NAME', name)}")
        return
    st.text_input("Your token", type="password", key=TOKEN_INPUT,
                  help="A principal's token, kept in this browser session only. A super-user makes one with: "
                       + CREATE)
    st.button("Sign in", key="signin.submit", type="primary", icon=":material/login:",
              on_click=_sign_in_with_token, args=(load_config().url,))
    if st.session_state.get("signin.error"):
        st.error(f"Sign-in refused: {st.session_state['signin.error']}", icon=":material/block:")
