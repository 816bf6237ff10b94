"""Three control-plane replicas behind one address (SO_REUSEPORT), their grants in a real Redis, one data
directory: participants spread over them; a replica killed mid-run or Redis restarted costs no over-grant, no
acknowledged policy change, and no operator action."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from controlplane.launcher import RedisServer, free_port
from tests.collectors.conftest import INTERVAL_S, Run, aggregate
from tests.controlplane.conftest import ADMIN, ControlPlane

pytestmark = pytest.mark.integration

LIMIT = 1000.0
REPLICAS = 3
VIEWS_AGREE_S = 2.0   # eight report intervals


class Replica(ControlPlane):
    def __init__(self, data_dir: Path, index: int, port: int, redis_url: str) -> None:
        super().__init__(data_dir, ["--report-interval", str(INTERVAL_S), "--reuse-port"],
                         env={"THROTTLESCOPE_REDIS_URL": redis_url})
        self.index, self.port = index, port

    @property
    def stderr_path(self) -> Path:
        return self.data_dir.parent / f"replica{self.index}.stderr.{self.starts}"

    def connections(self) -> int:
        """Participants' connections this replica holds (established, on the shared port)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        return sum(1 for c in psutil.Process(self.proc.pid).net_connections("tcp")
                   if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == self.port)

    def listening(self) -> bool:
        return self.proc is not None and any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port
                                             for c in psutil.Process(self.proc.pid).net_connections("tcp"))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[list[Replica], RedisServer]]:
    redis = RedisServer().start()
    port = free_port()
    replicas = [Replica(tmp_path / "cpdata", i, port, redis.url) for i in range(REPLICAS)]
    try:
        for r in replicas:
            r.start(keep_port=True)
        deadline = time.monotonic() + 10
        while not all(r.listening() for r in replicas):
            assert time.monotonic() < deadline, "not every replica listens on the shared port"
            time.sleep(0.05)
        yield replicas, redis
    finally:
        for r in replicas:
            r.kill()
        redis.close()


def _shared_limit(url: str) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as admin:
        assert admin.put("/admin/v2/resourcegroups/rg", json={"publishRateInMsgs": LIMIT}).status_code in (201, 204)
        assert admin.put("/admin/v2/namespaces/acme/rep/resourcegroup/rg").status_code == 204


def _start(url_holder: Replica, tmp_path: Path, duration_s: float) -> Run:
    run = Run(url_holder, tmp_path, lead_s=2.0)
    for i in range(6):   # 6 x 400 wanted of a 1,000 limit
        run.add(f"acme/rep/t{i}", [[0, 400]], duration_s, watch=["resource_group", "rg"])
    return run


def _windows(samples, t0: float, t1: float) -> list[float]:
    return [aggregate(samples, a, a + 1.0) for a in [t0 + 0.25 * k for k in range(int((t1 - t0 - 1.0) / 0.25) + 1)]]


def _longest_disconnected_s(samples, after: float) -> float:
    longest = 0.0
    for s in samples:
        since = None
        for row in s.rows:
            if row["t"] < after:
                continue
            if not row["connected"] and since is None:
                since = row["t"]
            elif row["connected"] and since is not None:
                longest, since = max(longest, row["t"] - since), None
        if since is not None:
            longest = max(longest, s.rows[-1]["t"] - since)
    return longest


def test_a_replica_killed_mid_run(cluster, tmp_path: Path) -> None:
    replicas, _ = cluster
    url = replicas[0].url
    _shared_limit(url)
    run = _start(replicas[0], tmp_path, 12.0)
    try:
        run.sleep_until(4.0)
        held = [r.connections() for r in replicas]
        assert sum(1 for n in held if n) >= 2, f"participants did not spread over the replicas: {held}"
        victim = replicas[max(range(REPLICAS), key=held.__getitem__)]
        # every replica's view is the whole platform's: once one view lists the six participants (within
        # VIEWS_AGREE_S: a replica reads the others' reports from the stream as they come, and on a busy host CI once
        # read 5, 5, then 6), the next nine fresh connections (spread over the replicas by the kernel) all do. (Nine
        # in a row within the 2 s: a busy CI host took 2 s for eight views, each on a fresh connection)
        # A view counts the participants it lists and those it let expire: on a slow host a report can come more
        # than two intervals late, and its participant leaves that replica's list until the next one (CI read 6, 6,
        # 5, 6 in an hour a no-op call took 60 ns, not 44; a late report is the likely cause, not traced). A replica
        # that never read a participant's reports has it in neither list
        def view() -> int:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=5) as viewer:
                body = viewer.get("/v1/state/participants").json()
            listed = {p["participantId"] for p in body["participants"]}
            return len(listed | {d["participantId"] for d in body["departed"] if d["departedBecause"] == "expired"})

        seen = [view()]
        deadline = time.monotonic() + VIEWS_AGREE_S
        while seen[-1] != 6 and time.monotonic() < deadline:
            seen.append(view())
        agreed = len(seen)
        seen += [view() for _ in range(9)]
        assert seen[agreed - 1:] == [6] * 10, f"participants each view listed, in turn: {seen}"
        # an admin changes policies through the one address while a replica dies
        acknowledged: list[str] = []

        def changes() -> None:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=5) as admin:
                for k in range(40):
                    try:
                        r = admin.put(f"/admin/v2/resourcegroups/other-{k}", json={"publishRateInMsgs": 10 + k})
                    except httpx.TransportError:
                        continue   # not acknowledged: the admin retries, or not
                    if r.status_code in (201, 204):
                        acknowledged.append(f"other-{k}")
                    time.sleep(0.02)

        writer = threading.Thread(target=changes)
        writer.start()
        run.sleep_until(5.0)
        victim._end(signal.SIGKILL)
        killed_at = time.time()
        writer.join()
        samples = run.wait()
    finally:
        run.kill_all()
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as admin:
        stored = set(admin.get("/admin/v2/resourcegroups").json())
    assert acknowledged and not set(acknowledged) - stored, "an acknowledged change was lost"
    # the participants of the dead replica are back within 2 intervals (plus a sample's 50 ms)
    assert _longest_disconnected_s(samples, killed_at - 0.1) <= 2 * INTERVAL_S + 0.1
    start = max(s.started for s in samples) + 1.5
    end = min(s.rows[-1]["t"] for s in samples) - 0.1
    rates = _windows(samples, start, end)
    around = _windows(samples, killed_at - 1.0, killed_at + 3.0)
    why = (f"windows {[round(r) for r in rates]}, around the kill {[round(r) for r in around]}, connections "
           f"{held}, longest disconnected {_longest_disconnected_s(samples, killed_at - 0.1):.2f} s")
    print(why)
    # the same margins as the single process's tests on a noisy 2-core machine (the benchmark holds tighter ones)
    assert max(rates) <= 1.1 * LIMIT, why
    assert sum(rates) / len(rates) >= 0.9 * LIMIT, why


def test_redis_restarted_mid_run(cluster, tmp_path: Path) -> None:
    replicas, redis = cluster
    _shared_limit(replicas[0].url)
    run = _start(replicas[0], tmp_path, 12.0)
    try:
        run.sleep_until(4.0)
        redis.close(signal.SIGKILL)
        down_at = time.time()
        time.sleep(1.0)
        redis.start()
        samples = run.wait()
    finally:
        run.kill_all()
    start = max(s.started for s in samples) + 1.5
    end = min(s.rows[-1]["t"] for s in samples) - 0.1
    rates = _windows(samples, start, end)
    after = _windows(samples, down_at + 4.0, end)
    why = f"windows {[round(r) for r in rates]}, after {[round(r) for r in after]}"
    print(why)
    assert max(rates) <= 1.1 * LIMIT, why   # no window over the limit: through the outage, nor when it is back
    # recovered without anyone's help: everyone reports again, and the limit is used again
    assert all(s.rows[-1]["connected"] for s in samples), why
    assert sum(after) / len(after) >= 0.9 * LIMIT, why
    # the replicas answer as before
    assert httpx.get(replicas[0].url + "/healthz", timeout=5).status_code == 200
