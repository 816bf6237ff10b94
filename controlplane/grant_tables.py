"""Where the grant book keeps each shared limit's windows: in this process, or in Redis for several replicas.

How it works and why
--------------------
``controlplane.grants.GrantBook`` works out every answer on a dict ``limit key -> _Limit`` (a limit's two
``GrantWindow``s and its adaptive state). A table hands it that dict and keeps what it did to it:

- ``MemoryTable`` (the default, one process): the dict lives here; ``edit`` runs the book's function on it
  under one lock. Nothing is copied.
- ``RedisTable`` (``--redis-url``: several control-plane replicas behind one address): each limit is one Redis
  string, ``<prefix>limit:<key>``, holding the pickled ``_Limit``. ``edit(keys, fn)`` is Redis's optimistic
  transaction: ``WATCH`` the keys, read them, run ``fn`` on the loaded objects, then ``MULTI``/``SET``/``EXEC``.
  If another replica wrote one of them in between, ``EXEC`` fails, and ``fn`` runs again on fresh copies (at most
  ``MAX_TRIES`` times; then ``StateStoreUnavailable``). So two replicas answering asks of one limit at once
  serialise exactly as two asks do in one process: no window is ever granted twice, whichever replica a
  participant talks to. Each blob expires ``idle_ttl_s`` after its last ask (a limit nobody asks about is
  forgotten, as after a restart).

Why whole objects and not a Lua script per ask: the grant rules (``limiter.grants``) stay in one place, in Python;
a script would be a second copy of them to keep in step. The cost is a read and a write of a limit's state per
ask (~1-2 kB for five holders) -- a report of thousands of limits costs that many; the replicated mode is for
spreading participants over processes and surviving one, not for PIP-82's largest case (docs/architecture.md).

Times in the windows are the book's clock, which with Redis is the wall clock (``time.time``): replicas on
different hosts share no monotonic clock, so hosts need synchronised clocks (as reports' ``sent_at`` already do).

Blobs are read with a restricted unpickler that builds only the grant classes and plain containers
(``ALLOWED``): a Redis that someone else can write to must not be a way to run code in the control plane. A blob
that cannot be read (that, another release's layout, a truncated one) is logged and started afresh.
A Redis that fails is ``StateStoreUnavailable`` (503: a participant keeps its last limits and retries), and for
``FAIL_FAST_S`` after it every request fails at once: answers run on the event loop, and each waiting for its
own timeout would hold every other request, reports included.

A Redis restarted (or flushed) has lost every window while participants still spend the grants they got; the
book must re-learn as after its own restart. The epoch key ``<prefix>epoch`` holds the time until which the
book learns; ``edit`` reads it with the limits, and when it is gone (a fresh Redis) writes the value the book's
``on_fresh`` gives (learning for a while if its marker says participants may be out there), once, for every
replica (``SET NX``). Run the Redis without persistence (``--save '' --appendonly no``): a snapshot restored
minutes old would bring back windows that miss the grants made since, and no learning.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import pickle
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

__all__ = ["GrantTable", "MemoryTable", "RedisTable", "StateStoreUnavailable", "Breaker", "ALLOWED", "MAX_TRIES",
           "FAIL_FAST_S", "loads", "dumps"]

log = logging.getLogger("controlplane")

MAX_TRIES = 50
FAIL_FAST_S = 0.5   # after Redis failed once: every request fails at once for this long, then tries again
ALLOWED = {("controlplane.grants", "_Limit"), ("limiter.grants", "GrantWindow"), ("limiter.spent", "SpentWindow"),
           ("controlplane.adaptive", "AdaptiveLimit"), ("limiter.adaptive", "AdaptiveRate"),
           ("limiter.adaptive", "Outcome"), ("collections", "deque"), ("collections", "OrderedDict")}


class StateStoreUnavailable(RuntimeError):
    """The shared state store (Redis) cannot be used; answered with 503."""


class Breaker:
    """One use of Redis that failed: for ``FAIL_FAST_S`` after a failure, ``open_reason()`` says why, so that the
    caller fails (or skips) at once -- a Redis that does not answer must not hold every request on the event
    loop for its own timeout. The start of an outage is logged once (``failing``: what fails and its cost), and
    its end (``back``)."""

    def __init__(self, failing: str, back: str) -> None:
        self.failing_text, self.back_text = failing, back
        self._until, self._reason, self.down = -math.inf, "", False

    def open_reason(self) -> str | None:
        return self._reason if time.monotonic() < self._until else None

    def failed(self, error: Exception) -> None:
        self._until, self._reason = time.monotonic() + FAIL_FAST_S, str(error)
        if not self.down:
            log.warning("throttlescope: %s (%s)", self.failing_text, error)
        self.down = True

    def worked(self) -> None:
        if self.down:
            log.info("throttlescope: %s", self.back_text)
        self.down = False


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not a grant-state class")
        return super().find_class(module, name)


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(blob: bytes) -> Any:
    return _Unpickler(io.BytesIO(blob)).load()


class GrantTable(Protocol):
    def edit(self, keys: Iterable[str], fn: Callable[[dict[str, Any], float | None], Any],
             on_fresh: Callable[[], float]) -> tuple[Any, float | None]:
        """Run ``fn(limits, learning_until)`` on the limits of ``keys`` (a dict it may add to, change and pop
        from) and keep what it did; (its result, ``learning_until``): a shared store's learning-until time
        (``on_fresh()`` for a fresh store), None for one process's table (the book's own holds)."""

    def read(self, fn: Callable[[dict[str, Any]], Any], keys: Iterable[str] | None = None) -> Any:
        """Run ``fn`` on every limit (those of ``keys`` that exist, when given), read-only."""

    def keys(self) -> list[str]:
        """Every limit's key, sorted."""

    def edit_all(self, fn: Callable[[dict[str, Any]], Any], on_fresh: Callable[[], float]) -> Any:
        """Run ``fn`` on every limit and keep what it did."""


class MemoryTable:
    """The limits in this process, under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._limits: dict[str, Any] = {}

    def edit(self, keys: Iterable[str], fn: Callable[[dict[str, Any], float | None], Any],
             on_fresh: Callable[[], float]) -> tuple[Any, float | None]:
        with self._lock:
            return fn(self._limits, None), None

    def read(self, fn: Callable[[dict[str, Any]], Any], keys: Iterable[str] | None = None) -> Any:
        with self._lock:
            if keys is None:
                return fn(self._limits)
            return fn({k: self._limits[k] for k in keys if k in self._limits})

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._limits)

    def edit_all(self, fn: Callable[[dict[str, Any]], Any], on_fresh: Callable[[], float]) -> Any:
        return self.read(fn)


class RedisTable:
    """The limits in Redis, one pickled ``_Limit`` per key, changed by optimistic transactions (module essay)."""

    def __init__(self, url: str, prefix: str = "throttlescope:grants:", idle_ttl_s: float = 300.0,
                 timeout_s: float = 1.0, client: Any = None) -> None:
        import redis  # only the replicated mode needs it

        self._redis_errors = (redis.RedisError, OSError)
        self._watch_error = redis.WatchError
        self.url, self.prefix = url, prefix
        self.idle_ttl_ms = max(1000, int(idle_ttl_s * 1000))
        self._redis = client if client is not None else redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, health_check_interval=30)
        self._epoch = prefix + "epoch"
        self._breaker = Breaker(f"the shared state store {url} cannot be used; grant asks are answered 503 "
                                f"until it is back", f"the shared state store {url} answers again")

    @contextlib.contextmanager
    def _store(self) -> Iterator[None]:
        """Redis's errors as ``StateStoreUnavailable``; for ``FAIL_FAST_S`` after one, at once (``Breaker``)."""
        reason = self._breaker.open_reason()
        if reason is not None:
            raise StateStoreUnavailable(f"the shared state store {self.url} cannot be used: {reason} "
                                        f"(failing fast for {FAIL_FAST_S:g} s)")
        try:
            yield
        except self._redis_errors as e:
            self._breaker.failed(e)
            raise StateStoreUnavailable(f"the shared state store {self.url} cannot be used: {e}") from e
        self._breaker.worked()

    def _loaded(self, names: list[str], blobs: list[bytes | None]) -> dict[str, Any]:
        """The limits of ``names`` that Redis holds and this version can read. One it cannot (another release's
        layout, a truncated or foreign blob) is left out -- started afresh, as after a restart, and overwritten
        by the answer -- and logged: refusing it would refuse every ask of that limit for as long as asks keep
        it alive."""
        out = {}
        for name, blob in zip(names, blobs, strict=True):
            if blob is None:
                continue
            try:
                out[name] = loads(blob)
            except Exception as e:  # noqa: BLE001 - whatever a foreign or truncated blob raises
                log.warning("throttlescope: the grant state of %s in %s cannot be read (%s: %s); it starts afresh",
                            name, self.url, type(e).__name__, e)
        return out

    def _key(self, key: str) -> str:
        return f"{self.prefix}limit:{key}"

    def edit(self, keys: Iterable[str], fn: Callable[[dict[str, Any], float | None], Any],
             on_fresh: Callable[[], float]) -> tuple[Any, float | None]:
        names = sorted(set(keys))
        watched = [self._epoch, *(self._key(k) for k in names)]
        with self._store():
            for _ in range(MAX_TRIES):
                with self._redis.pipeline() as pipe:
                    try:
                        pipe.watch(*watched)
                        epoch, *blobs = pipe.mget(watched)
                        limits = self._loaded(names, blobs)
                        loaded = set(limits)
                        learning_until = float(epoch) if epoch is not None else on_fresh()
                        result = fn(limits, learning_until)
                        pipe.multi()
                        if epoch is None:
                            pipe.set(self._epoch, repr(learning_until), nx=True)
                        for k, limit in limits.items():
                            pipe.set(self._key(k), dumps(limit), px=self.idle_ttl_ms)
                        gone = [self._key(k) for k in loaded - set(limits)]
                        if gone:
                            pipe.delete(*gone)
                        pipe.execute()
                        return result, learning_until
                    except self._watch_error:
                        continue
        raise StateStoreUnavailable(f"the shared state store {self.url} kept changing under {len(names)} limits "
                                    f"({MAX_TRIES} tries); try again")

    def _all_keys(self) -> list[str]:
        head = len(self._key(""))
        return sorted(name.decode()[head:] for name in self._redis.scan_iter(match=self._key("*"), count=1000))

    def read(self, fn: Callable[[dict[str, Any]], Any], keys: Iterable[str] | None = None) -> Any:
        with self._store():
            names = self._all_keys() if keys is None else list(keys)
            blobs = self._redis.mget([self._key(k) for k in names]) if names else []
        return fn(self._loaded(names, blobs))

    def keys(self) -> list[str]:
        with self._store():
            return self._all_keys()

    def edit_all(self, fn: Callable[[dict[str, Any]], Any], on_fresh: Callable[[], float]) -> Any:
        with self._store():
            keys = self._all_keys()
        return self.edit(keys, lambda limits, _learning_until: fn(limits), on_fresh)[0]
