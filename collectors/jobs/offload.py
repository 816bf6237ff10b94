"""The offload job: copy ledgers (files) from a hot directory to a cold one under the offload flow permits.

How it works and why
--------------------
A ledger is a file of the hot directory (``pattern``, default every visible file). The driver lists them,
leaves out those already offloaded (the cold copy and its ``.sha256`` sidecar exist, sizes match), and spreads
the rest over ``partitions`` Spark tasks by size. Each task copies its ledgers one after the other through
``limiter.offload.ThrottledReader`` on this worker's ``OffloadThrottle`` (PIP-211: broker-wide -- per
participant -- bytes per second, ``managedLedgerOffloadBrokerFlowPermitsPerSecond``): every ``chunk_bytes``
read asks the throttle first and sleeps while the current window's permits are spent. Reads are sized to the
bytes left, so no read is wasted on end-of-file.

A copy goes to a hidden temporary file in the cold directory, is flushed and fsynced, then verified -- its size
against the source's, and its SHA-256 (read back from disk) against the SHA-256 of the bytes read from the hot
file -- and only then renamed onto the ledger's name, followed by the ``<ledger>.sha256`` sidecar. A retried
task, a rerun, or a deadline mid-copy (``duration_s``: the temporary file is removed) leaves every ledger either
fully offloaded and verified or not at all. ``delete_source`` removes the hot file after a verified copy.

Every chunk is an event (wall time, bytes, whether the read waited for the throttle); the summary has ledgers
and bytes in and out, per participant the bytes, the achieved rate and the reads the throttle delayed
(``brk_ledgeroffloader_ledger_offload_limited``); ``events`` holds the chunks, for measurements.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from limiter.offload import ThrottledReader

from .common import (
    Deadline,
    atomic_write_text,
    optional_positive,
    per_participant,
    positive,
    ready_participant,
    split_evenly,
    summarize,
    task_info,
)

__all__ = ["OffloadConfig", "run_offload", "make_ledgers", "sha256_of"]


@dataclass(frozen=True)
class OffloadConfig:
    hot: str
    cold: str
    pattern: str = "*"
    chunk_bytes: int = 64 * 1024
    duration_s: float | None = None
    partitions: int | None = None
    delete_source: bool = False
    ready_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        positive("chunk_bytes", self.chunk_bytes, integer=True)
        optional_positive("duration_s", self.duration_s)
        optional_positive("partitions", self.partitions, integer=True)
        if Path(self.hot).resolve() == Path(self.cold).resolve():
            raise ValueError("hot and cold must be different directories")


def make_ledgers(hot: str | Path, count: int, size_bytes: int, seed: int = 7) -> list[Path]:
    """Write ``count`` ledgers ``ledger-<n>.bin`` of ``size_bytes`` pseudo-random bytes each."""
    import random

    hot = Path(hot)
    hot.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    for n in range(positive("count", count, integer=True)):
        path = hot / f"ledger-{n:06d}.bin"
        path.write_bytes(rng.randbytes(size_bytes))
        paths.append(path)
    return paths


def sha256_of(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(chunk):
            h.update(data)
    return h.hexdigest()


def _done(cold: Path, name: str, size: int) -> bool:
    copy, sidecar = cold / name, cold / f"{name}.sha256"
    return copy.exists() and sidecar.exists() and copy.stat().st_size == size


def _copy(p: Any, src: Path, cold: Path, config: OffloadConfig, deadline: Deadline, tag: str,
          events: list) -> dict[str, Any] | None:
    throttle = p.offload_throttle
    waited = [False]

    def sleep(delay_s: float) -> None:
        waited[0] = True
        time.sleep(delay_s)

    size = src.stat().st_size
    tmp = cold / f".{src.name}.{tag}.tmp"
    digest, copied = hashlib.sha256(), 0
    try:
        with open(src, "rb") as raw, open(tmp, "wb") as out:
            reader = ThrottledReader(raw, throttle, sleep=sleep)
            while copied < size:
                if deadline.passed():
                    return None  # not offloaded: the temporary copy is removed below
                waited[0] = False
                data = reader.read(min(config.chunk_bytes, size - copied))
                if not data:
                    raise OSError(f"{src} ended at {copied} of {size} bytes (changed while offloading?)")
                events.append((time.time(), len(data), waited[0]))
                digest.update(data)
                out.write(data)
                copied += len(data)
            out.flush()
            os.fsync(out.fileno())
        expected = digest.hexdigest()
        if tmp.stat().st_size != size or sha256_of(tmp) != expected:
            raise OSError(f"the cold copy of {src.name} does not match what was read (size or SHA-256)")
        os.replace(tmp, cold / src.name)
        atomic_write_text(cold / f"{src.name}.sha256", f"{expected}  {src.name}\n", tag)
    finally:
        if tmp.exists():
            tmp.unlink()
    if config.delete_source:
        src.unlink()
    return {"ledger": src.name, "bytes": size, "sha256": expected}


def offload_groups(groups: Iterable[list[str]], config: OffloadConfig, deadline_at: float) -> Iterator[dict]:
    """The ``mapPartitions`` body: copy each ledger of each group; one result dict per task."""
    task = task_info()
    p = ready_participant(config.ready_timeout_s)
    throttle = p.offload_throttle
    before = throttle.snapshot()
    deadline = Deadline.until(deadline_at)
    cold = Path(config.cold)
    cold.mkdir(parents=True, exist_ok=True)
    copied, left, events = [], [], []
    for group in groups:
        for name in group:
            done = _copy(p, Path(config.hot, name), cold, config, deadline, task.tag, events)
            (copied if done else left).append(done or name)
    after = throttle.snapshot()
    yield {"participant": p.participant_id, "partition": task.partition, "copied": copied, "left": left,
           "events": events, "reads_limited": after.reads_limited - before.reads_limited,
           "bytes_per_s_limit": after.bytes_per_s}


def run_offload(spark: Any, config: OffloadConfig) -> dict[str, Any]:
    """Run the offload job on ``spark``; returns its summary (``events``: every chunk read)."""
    hot, cold = Path(config.hot), Path(config.cold)
    if not hot.is_dir():
        raise ValueError(f"the hot directory {str(hot)!r} does not exist")
    ledgers = sorted((f.name, f.stat().st_size) for f in hot.glob(config.pattern)
                     if f.is_file() and not f.name.startswith((".", "_")))
    todo = [(n, s) for n, s in ledgers if not _done(cold, n, s)]
    started = time.time()
    rows: list[dict] = []
    if todo:
        parts = config.partitions or spark.sparkContext.defaultParallelism
        groups = [[n for n, _ in g] for g in split_evenly(todo, parts, weight=lambda item: item[1])]
        deadline_at = float("inf") if config.duration_s is None else started + config.duration_s
        rows = spark.sparkContext.parallelize(groups, len(groups)).mapPartitions(
            lambda it: offload_groups(it, config, deadline_at)).collect()
    ended = time.time()
    def add(agg: dict[str, Any], r: Mapping[str, Any]) -> None:
        agg["ledgers"] += len(r["copied"])
        agg["bytes"] += sum(c["bytes"] for c in r["copied"])
        agg["reads_limited"] += r["reads_limited"]
        agg["limit_bytes_per_s"] = r["bytes_per_s_limit"]

    participants = per_participant(rows, {"ledgers": 0, "bytes": 0, "reads_limited": 0}, add, "bytes",
                                   "bytes_per_s", 1)
    copied = [c for r in rows for c in r["copied"]]
    return summarize("offload", records_in=len(todo), records_out=len(copied),
                     bytes_in=sum(s for _, s in todo), bytes_out=sum(c["bytes"] for c in copied),
                     started_s=started, ended_s=ended, unit="ledgers", already_offloaded=len(ledgers) - len(todo),
                     not_copied=sorted(n for r in rows for n in r["left"]), verified=len(copied),
                     participants=participants, config=asdict(config),
                     events=[(r["participant"], *e) for r in rows for e in r["events"]])
