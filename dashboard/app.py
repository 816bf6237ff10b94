"""The dashboard's entry point and router: ``streamlit run dashboard/app.py``.

How and why
-----------
``st.navigation`` lists the pages (one module each under ``views/``, each with a thin ``main()``); this
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

__all__ = ["PAGES", "main"]

HERE = Path(__file__).parent
PAGES = (
    ("overview", "Overview", ":material/dashboard:"),
    ("buckets", "Buckets", ":material/water_drop:"),
    ("fairness", "Fairness", ":material/balance:"),
    ("offload", "Offload and mutations", ":material/cloud_upload:"),
    ("limits", "Limits", ":material/tune:"),
)


def main() -> None:
    st.set_page_config(page_title="throttlescope", page_icon=":material/speed:", layout="wide")
    pages = [st.Page(HERE / "views" / f"{name}.py", title=title, icon=icon, url_path=name, default=i == 0)
             for i, (name, title, icon) in enumerate(PAGES)]
    page = st.navigation(pages)
    ui.sidebar()
    page.run()


main()
