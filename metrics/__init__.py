"""throttlescope's metrics: the one metric catalogue
(``metrics.catalogue``) and the Prometheus collector that renders reports at scrape time (``metrics.collector``).

Names are exported lazily, so ``python -m metrics.catalogue`` runs without importing the module twice and the
report schema does not pull in the Prometheus client.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["CATALOGUE", "Metric", "ThrottlescopeCollector", "render_markdown"]

_WHERE = {"CATALOGUE": "metrics.catalogue", "Metric": "metrics.catalogue", "render_markdown": "metrics.catalogue",
          "ThrottlescopeCollector": "metrics.collector"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'metrics' has no attribute {name!r}")
