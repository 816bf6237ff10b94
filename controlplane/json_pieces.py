"""A JSON document as bytes, a piece at a time: how the big ``/v1/state/*`` views go out (``controlplane.renders``).

``json_pieces(doc)`` walks the lists of ``doc`` (plain dicts, lists, strings, numbers, None: what
``controlplane.views`` builds) and encodes their items ``ITEMS_PER_PIECE`` at a time with ``pydantic_core.to_json``
-- the encoder the response models use, so non-finite numbers become ``null`` as they would there -- yielding
``None`` after every ``ITEMS_PER_PIECE`` items, wherever they are nested: 100,000 participants' rows of 5,000
shared limits pause as often as 100,000 rows of one list. An item that holds a list (a shared limit with its
participants) is walked in turn; any other is encoded whole. Object keys keep their order, except that an object's
list-valued fields come after its others (JSON's objects are unordered).

Joined, the pieces parse to ``doc``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic_core import to_json

__all__ = ["json_pieces", "ITEMS_PER_PIECE"]

ITEMS_PER_PIECE = 1000   # list items encoded between two pauses (about 0.3 MB, 1-2 ms of CPU)


def _holds_list(value: Any) -> bool:
    if isinstance(value, dict):
        return any(isinstance(v, list) for v in value.values())
    return isinstance(value, list)


def _encoded(value: Any) -> bytes:
    return to_json(value, inf_nan_mode="null")


class _Walk:
    def __init__(self, items_per_piece: int) -> None:
        self.items_per_piece, self.items = items_per_piece, 0

    def counted(self, n: int) -> bool:
        """Count ``n`` items encoded; True when it is time to pause."""
        self.items += n
        if self.items < self.items_per_piece:
            return False
        self.items = 0
        return True

    def value(self, value: Any) -> Iterator[bytes | None]:
        if isinstance(value, list):
            yield from self.array(value)
        elif isinstance(value, dict) and _holds_list(value):
            yield from self.obj(value)
        else:
            yield _encoded(value)

    def obj(self, value: dict[str, Any]) -> Iterator[bytes | None]:
        head = _encoded({k: v for k, v in value.items() if not isinstance(v, list)})[:-1]   # without its "}"
        sep = b"," if len(head) > 1 else b""
        yield head
        for k, v in value.items():
            if isinstance(v, list):
                yield sep + _encoded(k) + b":"
                yield from self.array(v)
                sep = b","
        yield b"}"

    def array(self, items: list[Any]) -> Iterator[bytes | None]:
        yield b"["
        sep, batch = b"", []
        for item in items:
            if not _holds_list(item):
                batch.append(item)
                if self.items + len(batch) >= self.items_per_piece:
                    yield from self.batch(batch, sep)
                    sep, batch = b",", []
                continue
            if batch:
                yield from self.batch(batch, sep)
                sep, batch = b",", []
            yield sep
            sep = b","
            yield from self.value(item)
            if self.counted(1):
                yield None
        if batch:
            yield from self.batch(batch, sep)
        yield b"]"

    def batch(self, items: list[Any], sep: bytes) -> Iterator[bytes | None]:
        yield sep + _encoded(items)[1:-1]
        if self.counted(len(items)):
            yield None


def json_pieces(doc: Any, items_per_piece: int = ITEMS_PER_PIECE) -> Iterator[bytes | None]:
    """``doc`` as JSON bytes in pieces, ``None`` between every ``items_per_piece`` list items (see the essay)."""
    if items_per_piece < 1:
        raise ValueError(f"items_per_piece must be >= 1, got {items_per_piece!r}")
    buffer: list[bytes] = []
    for part in _Walk(items_per_piece).value(doc):
        if part is not None:
            buffer.append(part)
        elif buffer:
            yield b"".join(buffer)
            buffer = []
            yield None
    if buffer:
        yield b"".join(buffer)
