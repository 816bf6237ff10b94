"""One run's task files -> what its tasks did, every file read once.

Every task of a benchmark run writes into the run's folder (``kinds``' recorder):

- ``<pid>-<random>.log``: a line per admitted batch, ``<unix time> <rows> [<seconds waited> [<batch>]]``; a paced
  task (a source with a pace of its own: a trickle beside a greedy job) cuts each batch into slices and names the
  batch on each slice's line;
- ``<pid>-<random>.span`` beside it: ``<start> <end>``, the task's span so far (a file cut short by a kill is
  skipped).

``read_task_logs(log_dir)`` reads them into a ``TaskLogs``:

- ``waits``: ``(time, rows, seconds waited for the limiter)`` of every line (0 where a line has no wait), by time;
  ``events`` the same without the waits;
- ``paced_batches``: ``(time, seconds waited)`` of each batch of a paced task: when its last slice was admitted,
  and how long it waited -- its slices' waits summed (the lines of one task's file that name the batch);
- ``spans``: every task's ``(start, end)``, by start -- when Spark ran no task at all;
- ``demand_spans``: the spans of the tasks that send as fast as the limit lets them where some others are paced,
  else ``spans``. A paced task runs all the time, so beside it the greedy job's gaps between tasks read as a task
  running: where the limit went unused and Spark's gaps between micro-batches are the greedy job's.

The benchmark reads a run's files once for all its figures, and so does the shape command
(``python -m benchmarks.shared.windows``): a 16-worker stream leaves some 600 task files a run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TaskLogs", "read_task_logs"]


@dataclass(frozen=True)
class TaskLogs:
    """What one run's tasks wrote (see the module's docstring)."""

    waits: list[tuple[float, float, float]]
    paced_batches: list[tuple[float, float]]
    spans: list[tuple[float, float]]
    demand_spans: list[tuple[float, float]]

    @property
    def events(self) -> list[tuple[float, float]]:
        """``(time, rows)`` of every admission, by time."""
        return [(t, n) for t, n, _ in self.waits]


def read_task_logs(log_dir: Path) -> TaskLogs:
    """Every ``*.log`` and ``*.span`` file of ``log_dir``, read once."""
    waits: list[tuple[float, float, float]] = []
    batches: dict[tuple[str, str], list[float]] = {}   # (task, batch) -> [last admission, seconds waited]
    paced: set[str] = set()
    for path in Path(log_dir).glob("*.log"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) not in (2, 3, 4):
                continue
            t, rows, waited = float(parts[0]), float(parts[1]), float(parts[2]) if len(parts) >= 3 else 0.0
            waits.append((t, rows, waited))
            if len(parts) == 4:
                paced.add(path.stem)
                seen = batches.setdefault((path.stem, parts[3]), [0.0, 0.0])
                seen[0], seen[1] = max(seen[0], t), seen[1] + waited
    waits.sort()
    by_task = _spans_by_task(Path(log_dir).glob("*.span"))
    spans = sorted(by_task.values())
    greedy = sorted(span for task, span in by_task.items() if task not in paced)
    return TaskLogs(waits=waits, paced_batches=sorted((last, waited) for last, waited in batches.values()),
                    spans=spans, demand_spans=greedy or spans)


def _spans_by_task(paths: Iterable[Path]) -> dict[str, tuple[float, float]]:
    out = {}
    for path in paths:
        parts = path.read_text().split()
        if len(parts) == 2:
            out[path.stem] = (float(parts[0]), float(parts[1]))
    return out
