"""The dashboard's entry point and router: ``streamlit run dashboard/app.py``.

How and why
-----------
``st.navigation`` lists the pages (one module each under ``views/``, each with a thin ``main()``, each at its own
URL; the root opens the first); this
script runs on every rerun, draws the shared sidebar (control plane status, refresh interval, who is signed in and
how: ``signin.py``) and then the selected page. The folder is ``views/``, not ``pages/``: Streamlit treats
a ``pages/`` folder beside the entry script as a legacy multipage app and then ignores ``st.navigation`` on
direct URLs. Configuration comes from the environment (see ``config.py``):
``THROTTLESCOPE_URL``, ``THROTTLESCOPE_DASHBOARD_AUTH``, ``THROTTLESCOPE_ADMIN_TOKEN`` or ``THROTTLESCOPE_DATA_DIR``,
``PROMETHEUS_URL``.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from dashboard import ui

__all__ = ["PAGES", "pages", "main"]

HERE = Path(__file__).parent
PAGES = (
    ("overview", "Overview", ":material/dashboard:"),
    ("buckets", "Buckets", ":material/water_drop:"),
    ("fairness", "Fairness", ":material/balance:"),
    ("offload", "Offload and mutations", ":material/cloud_upload:"),
    ("limits", "Limits", ":material/tune:"),
)


def pages() -> list[st.Page]:
    """Every page at its own URL (``/overview``, ``/buckets``, ...), and the app's root, a hidden page that opens
    the first. Streamlit serves the default page at the root only and ignores its ``url_path``: were Overview the
    default, ``/overview`` (a bookmark, a link in a runbook) would open a "Page not found" dialog."""
    listed = [st.Page(HERE / "views" / f"{name}.py", title=title, icon=icon, url_path=name)
              for name, title, icon in PAGES]

    def home() -> None:
        st.switch_page(listed[0])

    return [st.Page(home, title=PAGES[0][1], url_path="home", default=True, visibility="hidden"), *listed]


def main() -> None:
    st.set_page_config(page_title="throttlescope", page_icon=":material/speed:", layout="wide")
    page = st.navigation(pages())
    ui.sidebar()
    page.run()


if __name__ == "__main__":
    main()
