"""Streamlit pieces every page shares: connection, sign-in, the live-refresh fragment, errors and the empty state.

How and why
-----------
- ``conn()`` is the one place a page gets its ``data.Conn``: the URL from the config and the signed-in
  principal's credentials (``signin.session()``: single-user local mode, a token sign-in or OIDC).
- ``live(fn)`` runs ``fn`` as ``st.fragment(run_every=...)``: only that part reruns every refresh, so the widgets
  outside it (filters, the limits editor) keep their values and focus, and charts keep their zoom (stable keys
  and ``uirevision``).
- ``need(doc)`` turns a ``data.Unavailable`` into a message saying what to do (start the control plane, give a
  token), so pages only deal with the happy path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pandas as pd
import streamlit as st

from dashboard import data, signin
from dashboard.config import REFRESH_CHOICES, Config, load_config

__all__ = ["config", "conn", "sidebar", "refresh_s", "live", "need", "show_unavailable", "empty_state", "plot",
           "table", "stamp", "aged"]

REFRESH_KEY = "refresh_s"
Answer = TypeVar("Answer")


def config() -> Config:
    return load_config()


def conn() -> data.Conn:
    return signin.session().conn


def refresh_s() -> float:
    return float(st.session_state.get(REFRESH_KEY, config().refresh_s))


def sidebar() -> None:
    cfg = config()
    with st.sidebar:
        health = data.health(data.Conn(cfg.url))
        if isinstance(health, data.Unavailable):
            st.error(f"Control plane down: {cfg.url}", icon=":material/cloud_off:")
        else:
            st.success(f"Control plane up: {cfg.url} (v{health['version']}, policy "
                       f"v{health['policyVersion']})", icon=":material/cloud_done:")
        choices = sorted({*REFRESH_CHOICES, cfg.refresh_s})
        st.select_slider("Refresh every (s)", options=choices, value=cfg.refresh_s, key=REFRESH_KEY,
                         help="How often the live parts of each page reload (THROTTLESCOPE_DASHBOARD_REFRESH)")
        signin.sidebar(signin.session())
        if cfg.prometheus_url:
            st.caption(f"History from Prometheus at {cfg.prometheus_url}")


def live(fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn(*args)`` as a fragment that reruns every ``refresh_s()`` seconds (and nothing else of the page).

    ``args`` are the values of widgets outside the fragment (filters): changing one reruns the whole page."""
    st.fragment(run_every=refresh_s())(fn)(*args)


def show_unavailable(u: data.Unavailable) -> None:
    url = config().url
    if u.down:
        st.error(f"The control plane at {url} does not answer: {u.reason}", icon=":material/cloud_off:")
        st.info("Start it with `make run` (everything in the Procfile), or alone with "
                "`python -m controlplane --port 8000 --data-dir ./data`; point the dashboard elsewhere with "
                "`THROTTLESCOPE_URL`. This page retries on every refresh.")
    elif u.needs_token:
        st.warning(f"The control plane refused to answer {u.endpoint}: {u.reason}. Sign in (in the sidebar) as a "
                   "principal; for single-user local mode, start the dashboard with `THROTTLESCOPE_ADMIN_TOKEN` or "
                   "the control plane's data dir as `THROTTLESCOPE_DATA_DIR`.", icon=":material/key:")
    else:
        st.error(f"{u.endpoint}: {u.reason} (HTTP {u.status})")


def need(doc: Answer | data.Unavailable) -> Answer | None:
    """``doc`` itself (a state answer's model, any other answer's JSON), or None after showing why it is
    unavailable."""
    if isinstance(doc, data.Unavailable):
        show_unavailable(doc)
        return None
    return doc


def empty_state(what: str = "No participant has reported yet") -> None:
    url = config().url
    st.info(
        f"**{what}.** This page fills in once a Spark job (or any process using `limiter`) reports to the "
        f"control plane at `{url}`.\n\n"
        "- Everything at once: `make run` starts the control plane, this dashboard and a demo Spark job "
        "(the Procfile).\n"
        f"- Your own job: set `THROTTLESCOPE_URL={url}` and `THROTTLESCOPE_TOKEN=<participant token>` (the "
        "control plane's `data/participant.token`) on the driver, and pass both to the executors with "
        "`--conf spark.executorEnv.THROTTLESCOPE_URL=...` and `--conf spark.executorEnv.THROTTLESCOPE_TOKEN=...`.",
        icon=":material/rocket_launch:")


def plot(fig: Any, key: str) -> None:
    st.plotly_chart(fig, key=key, config={"displaylogo": False})


def table(rows: Sequence[dict[str, Any]], key: str | None = None, empty: str = "nothing to show",
          **column_config: Any) -> None:
    if not rows:
        st.caption(empty)
        return
    st.dataframe(_texts_where_mixed(pd.DataFrame(list(rows))), hide_index=True, key=key,
                 column_config=column_config or None)


def _texts_where_mixed(frame: pd.DataFrame) -> pd.DataFrame:
    """A column of numbers and words (a limit: 40, or "unlimited") as text throughout: a table column has one
    type (Arrow's), and would otherwise fail to convert."""
    for column in frame.columns:
        words = frame[column].map(lambda v: isinstance(v, str))
        if words.any() and not words.all():
            frame[column] = frame[column].map(_text)
    return frame


def _text(v: Any) -> str:
    if isinstance(v, str) or v is None:
        return v or ""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.6g}"


def stamp(**views: Any) -> None:
    """The page's refresh time; and, for each of ``views`` (a name: its answer) the control plane handed out
    again rather than rendered anew (a view this large is rendered at most so often), how old it is."""
    st.caption(f"live: refreshed at {time.strftime('%H:%M:%S')}, every {refresh_s():g} s" + aged(views))


def aged(views: dict[str, Any]) -> str:
    """``stamp``'s words on the views that came from an earlier render ("" when none did)."""
    old = [(name.replace("_", " "), age) for name, view in views.items()
           if (age := getattr(view, "age_s", None)) is not None]
    if not old:
        return ""
    parts = ", ".join(f"{name} {age:.0f} s" for name, age in old)
    return (f"; rendered earlier by the control plane, which renders views this large at most so often: {parts} "
            "old")
