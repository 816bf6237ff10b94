"""A driver of a master on this machine -- the demo's, the CLI jobs', the tests' -- listens on loopback only.

Spark binds its driver's RPC and block manager to the address the host name resolves to and its UI (which can kill
jobs) to every interface unless ``SPARK_LOCAL_IP`` says otherwise. Read here from the kernel: every TCP socket the
session's JVM listens on, from /proc."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from collectors.jobs.common import driver_on_loopback

pytestmark = [pytest.mark.spark, pytest.mark.parallel]

ROOT = Path(__file__).resolve().parents[2]

# run in a fresh interpreter: its own JVM, started by the helper the demo and the CLI jobs use
_SESSION = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from collectors.jobs.common import spark_session
from tests.spark.test_loopback import listening_addresses
spark = spark_session("local[1]", "loopback-check")
assert spark.range(10).rdd.map(lambda x: x).count() == 10   # a Python worker and the block manager at work
print(json.dumps({"ui": spark.sparkContext.uiWebUrl,
                  "listening": sorted(listening_addresses(spark.sparkContext._gateway.proc.pid))}))
spark.stop()
"""


def listening_addresses(pid: int) -> set[str]:
    """The local addresses of the TCP sockets process ``pid`` listens on (``/proc/<pid>/fd`` and ``/proc/net``)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue   # closed since listed
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:   # 0A: LISTEN
                found.add(_address(local.split(":")[0]))
    return found


def _address(hex_address: str) -> str:
    """/proc/net/tcp{,6}'s address: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def test_a_local_master_listens_on_loopback_unless_told_otherwise() -> None:
    environ: dict[str, str] = {}
    assert driver_on_loopback("local[2]", environ) and environ == {"SPARK_LOCAL_IP": "127.0.0.1"}
    assert driver_on_loopback("local-cluster[2,1,512]", {}) and driver_on_loopback("spark://127.0.0.1:7077", {})
    chosen = {"SPARK_LOCAL_IP": "10.1.2.3"}   # the operator's choice stands
    assert not driver_on_loopback("local[2]", chosen) and chosen == {"SPARK_LOCAL_IP": "10.1.2.3"}
    remote: dict[str, str] = {}   # executors elsewhere must reach the driver
    assert not driver_on_loopback("spark://spark-master.internal:7077", remote) and remote == {}
    assert not driver_on_loopback("yarn", remote) and remote == {}


@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads the sockets from Linux's /proc")
def test_the_jobs_session_listens_on_loopback_only() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    done = subprocess.run([sys.executable, "-c", _SESSION, str(ROOT)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["listening"], "the JVM listens on nothing: the check read no socket"
    assert all(ipaddress.ip_address(a).is_loopback for a in seen["listening"]), seen
    assert urlsplit(seen["ui"]).hostname in ("127.0.0.1", "localhost"), seen
