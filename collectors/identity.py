"""Who a participant is: application id, executor id, host, pid, and a participant id unique per process lifetime.

Sources, first found wins:

- application id: THROTTLESCOPE_APP_ID, SPARK_APPLICATION_ID, the active SparkContext's ``applicationId`` (the
  driver), else ``'local'``;
- executor id: THROTTLESCOPE_EXECUTOR_ID, SPARK_EXECUTOR_ID, ``'executor'`` inside a Spark task (a
  ``TaskContext`` exists: a Python worker), else ``'driver'``.

PySpark is consulted only when the process has imported it already (a Python worker always has): importing it
here would cost a second in every process that never uses Spark. Python workers do not see the executor's id or
the application id, so Spark jobs pass them with ``spark.executorEnv.THROTTLESCOPE_APP_ID`` (the Spark helpers do).

``participant_id`` is ``<app>/<executor>/<host>/<pid>/<random>``: the random part makes it unique per process
lifetime, so a reused pid (or a forked child) is a new participant, as the control plane's ``seq`` rule needs.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol import Participant as WireParticipant

from .worker_heap import in_spark_task

__all__ = ["Identity", "detect_identity"]

_PART_MAX = 96


def _clean(text: Any, fallback: str) -> str:
    """Printable, no '/', bounded: safe as a wire label and as a part of the participant id."""
    cleaned = "".join(c if c.isprintable() and c != "/" else "_" for c in str(text)).strip()[:_PART_MAX]
    return cleaned or fallback


@dataclass(frozen=True)
class Identity:
    application_id: str
    executor_id: str
    host: str
    pid: int
    participant_id: str

    def to_wire(self) -> WireParticipant:
        return WireParticipant(participant_id=self.participant_id, application_id=self.application_id,
                               executor_id=self.executor_id, host=self.host, pid=self.pid)


def _spark() -> tuple[str | None, bool]:
    """(application id if this is a driver with an active SparkContext, whether a Spark task runs here)."""
    if "pyspark" not in sys.modules:
        return None, False
    in_task, app_id = in_spark_task(), None
    if not in_task:
        try:
            from pyspark import SparkContext
            sc = SparkContext._active_spark_context
            app_id = sc.applicationId if sc is not None else None
        except Exception:  # noqa: BLE001
            app_id = None
    return app_id, in_task


def detect_identity(app_id: str | None = None, executor_id: str | None = None,
                    env: Mapping[str, str] | None = None) -> Identity:
    """This process's identity (see the module doc); explicit arguments win over the environment."""
    env = os.environ if env is None else env
    spark_app, in_task = _spark()
    app = app_id or env.get("THROTTLESCOPE_APP_ID") or env.get("SPARK_APPLICATION_ID") or spark_app or "local"
    executor = (executor_id or env.get("THROTTLESCOPE_EXECUTOR_ID") or env.get("SPARK_EXECUTOR_ID")
                or ("executor" if in_task else "driver"))
    app, executor = _clean(app, "local"), _clean(executor, "driver")
    host = _clean(socket.gethostname(), "localhost")
    pid = os.getpid()
    return Identity(app, executor, host, pid, f"{app}/{executor}/{host}/{pid}/{secrets.token_hex(4)}")
