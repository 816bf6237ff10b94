"""One ASGI middleware in front of every route: authorise, then bound the body, before any routing or parsing.

1. Authorisation (``access.need`` and ``access.refusal``): the bearer token names a principal
   (``principals.Directory``); 401 without a bearer token, 403 with one that is not enough (an unknown or revoked
   token, or a principal whose role may not do this; a 403 rather than RFC 6750's 401 for a bad token, so a
   client can tell "no token sent" from "this token will not do"). A proxy principal may name, in
   ``X-Original-Principal``, the principal it acts for (Pulsar's proxy roles); that principal's rights then apply.
   The principal and the name the audit log records (``ana``, or ``ana (via dashboard)``) are put in
   ``scope["state"]``; nothing the caller declares about itself is taken.
2. Body size: a Content-Length above the limit is refused with 413 before anything is read; otherwise the body
   is read up to the limit (counting streamed chunks, so a lying or absent Content-Length does not help) and
   replayed to the application.
3. Compressed bodies: ``Content-Encoding: gzip`` is inflated here, up to its own limit (a participant of
   thousands of limits sends megabytes of JSON that gzip shrinks six-fold; a small compressed body must not
   inflate to gigabytes either), and the route sees the plain JSON; any other encoding is refused with 415,
   a body that is not gzip with 400. (Answers are compressed for a client that accepts it: ``app.py``, and
   ``deflated`` for the participants' fast path, which answers before FastAPI's gzip middleware.)
4. JSON nesting: a body nested deeper than the limit is refused with 400 before the JSON parser sees it.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controlplane import access
from controlplane.principals import Directory, Principal

_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string, escapes included
_QUOTED = re.compile(rb'"[^"]*"')   # one, where no quote is escaped
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_NOT_BRACKETS_OR_QUOTES = bytes(c for c in range(256) if c not in b'[]{}"')
_SQUARE = bytes.maketrans(b"{}", b"[]")   # an object nests as an array does


def json_depth(body: bytes, most: int | None = None) -> int:
    """Maximum nesting of arrays/objects in ``body`` (string contents ignored); a cheap pre-parse check. With
    ``most``: any number above it once the nesting is found deeper (the guard's question; it stops there).

    Never less than the nesting a parser would reach; for a body that is not JSON (brackets that do not pair up)
    it may say more, and such a body is refused either way."""
    if b"\\" in body:   # (a quote may be escaped: the strings are found by the regex, escapes and all)
        brackets = _STRINGS.sub(b"", body).translate(_SQUARE, _NOT_BRACKETS)
    else:
        # Without a backslash quotes alternate opening and closing strings: keep the brackets and quotes, drop the
        # empty strings that are left of most (names, labels), and only what remains needs the regex. All in C:
        # 3x faster than splitting the body at its quotes (a report of 100 shared limits, 36 kB: 114 -> 35 us)
        marks = body.translate(_SQUARE, _NOT_BRACKETS_OR_QUOTES).replace(b'""', b"")
        brackets = _QUOTED.sub(b"", marks) if b'"' in marks else marks
    # Each round drops every innermost pair, one level of nesting: a report takes five rounds, not a Python loop over
    # its hundreds of brackets. Dropping a pair lowers the deepest nesting by one at most, so rounds plus the depth of
    # what is left (brackets that never closed) is never less than the real depth
    rounds = 0
    while most is None or rounds <= most:   # (each round reads what is left: a deep body stops at ``most``)
        inner_dropped = brackets.replace(b"[]", b"")
        if len(inner_dropped) == len(brackets):
            break
        brackets, rounds = inner_dropped, rounds + 1
    if most is not None and rounds > most:
        return rounds
    depth = deepest = 0
    for c in brackets:
        if c == 0x5B:  # [
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return rounds + deepest


async def _send_reason(send: Send, status: int, reason: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"reason": reason}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


ORIGINAL_PRINCIPAL = b"x-original-principal"   # Pulsar's header: whom a proxy acts for


def bearer(authorization: bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = (authorization or b"").partition(b" ")
    token = token.strip()
    return token.decode("latin-1") if scheme.lower() == b"bearer" and token else None


def acting(directory: Directory, caller: Principal | None,
           original: bytes | None) -> tuple[Principal | None, str, str | None]:
    """(the principal whose rights apply, the name the audit log records, or why the request is refused)."""
    if caller is None:
        return None, "anonymous", None
    if caller.revoked is not None:
        return None, caller.name, f"the token of {caller.describe()} was revoked"
    name = (original or b"").decode("latin-1").strip()
    if not name or name == caller.name:
        return caller, caller.name, None
    shown = repr(name[:64])
    if caller.role != "proxy":
        return None, caller.name, (f"only a proxy principal may act for another (X-Original-Principal {shown}); "
                                   f"{caller.describe()} is not one")
    target = directory.get(name)
    if target is None or target.revoked is not None:
        return None, caller.name, (f"X-Original-Principal {shown} is not an active principal of this control "
                                   f"plane; a super-user creates it with: python -m controlplane principals create "
                                   f"{name[:64]} --role viewer (or tenant-admin, super-user)")
    if target.role == "proxy":
        return None, caller.name, "a proxy cannot act for another proxy"
    return target, f"{target.name} (via {caller.name})", None


class GuardMiddleware:
    def __init__(self, app: ASGIApp, *, directory: Directory, open_reads: bool, max_body_bytes: int,
                 max_json_depth: int, max_inflated_bytes: int | None = None) -> None:
        self.app = app
        self.directory = directory
        self.open_reads = open_reads
        self.max_body = max_body_bytes
        self.max_inflated = max_inflated_bytes if max_inflated_bytes is not None else 16 * max_body_bytes
        self.max_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for k, v in scope.get("headers", ()):
            headers.setdefault(k.lower(), v)
        method, path = scope["method"], scope["path"]
        need = access.need(method, path)
        token = bearer(headers.get(b"authorization"))
        caller = self.directory.lookup(token) if token is not None else None
        principal, actor, problem = acting(self.directory, caller, headers.get(ORIGINAL_PRINCIPAL))
        if not (need.kind == "open" or (need.kind == "reader" and self.open_reads)):
            if token is None:
                await _send_reason(send, 401, f"{method} {path} needs a token: 'Authorization: Bearer <token>' of a "
                                   "principal (see GET /v1/whoami)", [(b"www-authenticate", b"Bearer")])
                return
            if caller is None:
                problem = f"an unknown token may not call {method} {path}"
            problem = problem or access.refusal(need, principal, self.directory.is_admin_of, method, path)
            if problem:
                await _send_reason(send, 403, problem,
                                   [(b"www-authenticate", b'Bearer error="insufficient_scope"')])
                return
        state = scope.setdefault("state", {})
        state["principal"], state["actor"] = (principal, actor) if problem is None else (None, "anonymous")
        state["via"] = caller.name if problem is None and principal is not caller else None

        length = headers.get(b"content-length")
        if length is not None:
            if not length.strip().isdigit():
                await _send_reason(send, 400, "Content-Length must be a non-negative integer")
                return
            if int(length) > self.max_body:
                await _send_reason(send, 413, f"the body is {int(length)} bytes; at most {self.max_body} are allowed")
                return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _send_reason(send, 413, f"the body is larger than the {self.max_body} bytes allowed")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b"gzip"):
            await _send_reason(send, 415, f"Content-Encoding {encoding.decode('latin-1')[:32]!r} is not supported; "
                                          "send the body as it is (identity) or gzip-compressed (gzip)")
            return
        if encoding == b"gzip":
            try:
                body = inflate(body, self.max_inflated)
            except BodyRefused as e:
                await _send_reason(send, e.status, e.reason)
                return
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"]
                                          if k.lower() not in (b"content-encoding", b"content-length")]
                     + [(b"content-length", str(len(body)).encode())]}
        if body and json_depth(body, self.max_depth) > self.max_depth:
            await _send_reason(send, 400, f"the JSON body is nested deeper than {self.max_depth} levels")
            return

        await self.app(scope, replay_body(body, receive), send)


class BodyRefused(Exception):
    """A body the guard will not pass on: the HTTP status and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def inflate(body: bytes, limit: int) -> bytes:
    """The gzip ``body`` inflated; ``BodyRefused`` if it is not gzip (400) or inflates to more than ``limit``
    bytes (413: read no further than that, so a small body cannot make the control plane allocate gigabytes). A
    body of several gzip members (RFC 1952 allows it; a sender may compress a fixed part once) inflates to their
    concatenation."""
    out, rest = bytearray(), body
    while True:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            out += inflater.decompress(rest, limit + 1 - len(out))
        except zlib.error as e:
            raise BodyRefused(400, f"Content-Encoding is gzip but the body is not valid gzip ({e})") from None
        if len(out) > limit:
            raise BodyRefused(413, f"the body inflates to larger than the {limit} bytes allowed")
        if not inflater.eof:
            raise BodyRefused(400, "Content-Encoding is gzip but the body ends before its gzip stream does")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)


ANSWER_GZIP_ABOVE_BYTES = 1024   # an answer this long or longer is gzip-compressed for a client that accepts it


def deflated(scope: Scope, payload: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """``payload`` gzip-compressed (level 1) when it is ``ANSWER_GZIP_ABOVE_BYTES`` or longer and the client
    accepts gzip, as the routes' answers are (starlette's GZipMiddleware); the headers that say so."""
    if len(payload) >= ANSWER_GZIP_ABOVE_BYTES:
        for name, value in scope["headers"]:
            if name.lower() == b"accept-encoding" and b"gzip" in value.lower():
                return gzip.compress(payload, 1), [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
    return payload, []


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the already-read ``body`` once, then whatever ``receive`` gives (a disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


def actor_of(request: Any) -> str:
    """The name the audit log records for this request, as the middleware authenticated it."""
    return getattr(request.state, "actor", None) or "anonymous"


def principal_of(request: Any) -> Principal | None:
    """The principal whose rights apply to this request (None on open endpoints without a valid token)."""
    return getattr(request.state, "principal", None)
