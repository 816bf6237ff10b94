"""One ASGI middleware in front of every route: authorise, then bound the body, before any routing or parsing.

1. Authorisation (``auth.required_role``): 401 without a bearer token, 403 with a token that is not enough
   (the participant token on an admin call, or an unknown token; the issue's rule, not RFC 6750's).
   The caller's role is put in ``scope["state"]["role"]`` for the audit log.
2. Body size: a Content-Length above the limit is refused with 413 before anything is read; otherwise the body
   is read up to the limit (counting streamed chunks, so a lying or absent Content-Length does not help) and
   replayed to the application.
3. JSON nesting: a body nested deeper than the limit is refused with 400 before the JSON parser sees it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controlplane.auth import Tokens, allows, required_role

_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string, escapes included
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


def json_depth(body: bytes) -> int:
    """Maximum nesting of arrays/objects in ``body`` (string contents ignored); a cheap pre-parse check."""
    # Without a backslash no quote is escaped, so quotes alternate opening and closing strings: what lies outside
    # them is every other piece of a split (4x faster than the regex, which only bodies with escapes need).
    outside = _STRINGS.sub(b"", body) if b"\\" in body else b"".join(body.split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for c in brackets:
        if c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


async def _send_reason(send: Send, status: int, reason: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"reason": reason}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


def has_bearer(authorization: bytes | None) -> bool:
    scheme, _, token = (authorization or b"").partition(b" ")
    return scheme.lower() == b"bearer" and bool(token.strip())


class GuardMiddleware:
    def __init__(self, app: ASGIApp, *, tokens: Tokens, open_reads: bool, max_body_bytes: int,
                 max_json_depth: int) -> None:
        self.app = app
        self.tokens = tokens
        self.open_reads = open_reads
        self.max_body = max_body_bytes
        self.max_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for k, v in scope.get("headers", ()):
            headers.setdefault(k.lower(), v)
        requirement = required_role(scope["method"], scope["path"])
        auth = headers.get(b"authorization")
        role = self.tokens.role_of(auth.decode("latin-1") if auth is not None else None)
        if not allows(requirement, role, self.open_reads):
            needed = "the admin token" if requirement == "admin" else "the admin or a participant token"
            if not has_bearer(auth):
                await _send_reason(send, 401, f"this endpoint needs a token: 'Authorization: Bearer <token>' "
                                   f"with {needed}", [(b"www-authenticate", b"Bearer")])
            else:
                given = "the participant token" if role == "participant" else "an unknown token"
                await _send_reason(send, 403, f"{given} may not call {scope['method']} {scope['path']}; "
                                   f"it needs {needed}", [(b"www-authenticate", b'Bearer error="insufficient_scope"')])
            return
        scope.setdefault("state", {})["role"] = role

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
        if body and json_depth(body) > self.max_depth:
            await _send_reason(send, 400, f"the JSON body is nested deeper than {self.max_depth} levels")
            return

        await self.app(scope, replay_body(body, receive), send)


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


def role_of(request: Any) -> str:
    """The caller's role as the middleware established it ('anonymous' on open endpoints)."""
    return getattr(request.state, "role", None) or "anonymous"
