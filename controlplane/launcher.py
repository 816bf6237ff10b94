"""Start ``python -m controlplane`` as a child process on a loopback port, and tell when it is ready.

The one place that knows how: the test suite, the benchmarks and anyone scripting a throwaway control plane (a
notebook, a CI job) start it with ``spawn`` and end it with ``end``. Nothing here imports the server itself,
so using it costs no FastAPI import.

    port = free_port()
    proc = spawn(port, Path("/tmp/cp-data"), args=["--report-interval", "0.5"], log_path=Path("/tmp/cp.log"))
    ...  # http://127.0.0.1:{port} answers
    end(proc)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path

import httpx

__all__ = ["free_port", "env_without_settings", "spawn", "end", "RedisServer"]

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def env_without_settings(environ: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``environ`` (default: this process's) without any THROTTLESCOPE_* variable, plus ``extra``."""
    env = {k: v for k, v in (os.environ if environ is None else environ).items()
           if not k.startswith("THROTTLESCOPE_")}
    env.update(extra)
    return env


def spawn(port: int, data_dir: Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
          log_path: Path | None = None, cwd: Path | None = None, timeout_s: float = 20.0,
          log_level: str = "warning") -> subprocess.Popen[bytes]:
    """Start the control plane on ``127.0.0.1:port`` and return once ``/healthz`` answers 200.

    Its output goes to ``log_path`` (appended; default: discarded). Raises RuntimeError, with the end of the log,
    if it exits first or does not answer within ``timeout_s`` (then it is killed)."""
    command = [sys.executable, "-m", "controlplane", "--host", HOST, "--port", str(port), "--data-dir",
               str(data_dir), "--log-level", log_level, *args]
    with open(log_path, "ab") if log_path is not None else nullcontext(subprocess.DEVNULL) as out:
        proc = subprocess.Popen(command, cwd=cwd, env=dict(env) if env is not None else None, stdout=out, stderr=out)
    url = f"http://{HOST}:{port}/healthz"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the control plane exited with {proc.returncode}: {_tail(log_path)}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    end(proc, signal.SIGKILL)
    raise RuntimeError(f"the control plane did not answer {url} within {timeout_s:g} s: {_tail(log_path)}")


def end(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
    """Send ``sig`` (SIGTERM: a clean shutdown; SIGKILL: a crash) and wait; kill it if it outlives ``timeout_s``."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)


def _tail(log_path: Path | None, chars: int = 2000) -> str:
    if log_path is None:
        return "(no log kept)"
    try:
        return log_path.read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"(log unreadable: {e})"


class RedisServer:
    """Debian's ``redis-server`` on a loopback port, without persistence (what the replicated control plane's
    shared state needs, see controlplane.grant_tables). ``start`` again after ``close`` keeps the port: a Redis
    restarted where everyone looks for it."""

    def __init__(self, port: int | None = None) -> None:
        self.binary = shutil.which("redis-server")
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        if self.binary is None:
            raise RuntimeError("redis-server was not found (Debian: apt-get install redis-server)")
        self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", HOST, "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode} (port {self.port} taken?)")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.close()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout_s:g} s")

    def close(self, sig: int = signal.SIGTERM) -> None:
        end(self.proc, sig)
        self.proc = None
