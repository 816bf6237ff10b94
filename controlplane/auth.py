"""Tokens and who may call what.

Two bearer tokens (``Authorization: Bearer <token>``):

- the *admin* token (THROTTLESCOPE_ADMIN_TOKEN) may do everything;
- the *participant* token (THROTTLESCOPE_TOKEN) may report (``/v1/report``, ``/v1/goodbye``) and read.

A token not given in the environment is read from its file in the data directory (``admin.token``,
``participant.token``), or generated with ``secrets`` at first start, written there with mode 0600 and printed
once to stderr, as Jupyter does. Tokens are compared in constant time (``hmac.compare_digest``) and never logged.

``required_role(method, path)`` is the one rule for every route, enforced by a middleware before routing, so an
endpoint added later cannot escape it: GET/HEAD need a reader (any token, or none when reads are open), every
other method needs the admin, except the participant endpoints.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO

from controlplane.config import ConfigError

Role = Literal["admin", "participant"]
Requirement = Literal["open", "reader", "participant", "admin"]

ADMIN_TOKEN_FILE = "admin.token"
PARTICIPANT_TOKEN_FILE = "participant.token"
MIN_TOKEN_LEN = 16
MAX_TOKEN_LEN = 1024
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
PARTICIPANT_PATHS = frozenset({"/v1/report", "/v1/goodbye"})


@dataclass(frozen=True)
class Tokens:
    admin: str = field(repr=False)
    participant: str = field(repr=False)

    def role_of(self, authorization: str | None) -> Role | None:
        """The role a presented ``Authorization`` header grants, or None (constant time in the token)."""
        if not authorization:
            return None
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        given = presented.strip().encode("utf-8", "surrogateescape")
        is_admin = hmac.compare_digest(given, self.admin.encode())
        is_participant = hmac.compare_digest(given, self.participant.encode())
        return "admin" if is_admin else "participant" if is_participant else None


def required_role(method: str, path: str) -> Requirement:
    method = method.upper()
    if method in ("GET", "HEAD") and path in OPEN_PATHS:
        return "open"
    if method == "POST" and path in PARTICIPANT_PATHS:
        return "participant"
    if method in ("GET", "HEAD"):
        return "reader"
    return "admin"


def allows(requirement: Requirement, role: Role | None, open_reads: bool) -> bool:
    if requirement == "open" or (requirement == "reader" and open_reads):
        return True
    if requirement == "admin":
        return role == "admin"
    return role is not None


def _check_token(token: str, source: str) -> str:
    if not MIN_TOKEN_LEN <= len(token) <= MAX_TOKEN_LEN:
        raise ConfigError(f"{source} must be {MIN_TOKEN_LEN}..{MAX_TOKEN_LEN} characters long "
                          f"(got {len(token)}); generate one with: python -c 'import secrets; "
                          "print(secrets.token_urlsafe(32))'")
    if not all(33 <= ord(c) <= 126 for c in token):
        raise ConfigError(f"{source} must be printable ASCII without spaces")
    return token


def _load_or_create(path: Path, what: str, err: TextIO) -> str:
    try:
        st = path.stat()
    except FileNotFoundError:
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        print(f"throttlescope control plane: generated a new {what} token, stored in {path} (mode 0600).\n"
              f"Send it as 'Authorization: Bearer <token>'. It is shown only this once:\n\n    {token}\n",
              file=err, flush=True)
        return token
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o600)
        print(f"throttlescope control plane: {path} was readable by others; its mode is now 0600", file=err)
    return _check_token(path.read_text().strip(), str(path))


def load_tokens(data_dir: Path, env: Mapping[str, str] | None = None, err: TextIO | None = None) -> Tokens:
    """Tokens from the environment, else from (or generated into) the data directory. Raises ConfigError."""
    env = os.environ if env is None else env
    err = sys.stderr if err is None else err
    admin_env, part_env = env.get("THROTTLESCOPE_ADMIN_TOKEN"), env.get("THROTTLESCOPE_TOKEN")
    admin = (_check_token(admin_env, "THROTTLESCOPE_ADMIN_TOKEN") if admin_env
             else _load_or_create(data_dir / ADMIN_TOKEN_FILE, "admin", err))
    participant = (_check_token(part_env, "THROTTLESCOPE_TOKEN") if part_env
                   else _load_or_create(data_dir / PARTICIPANT_TOKEN_FILE, "participant", err))
    if hmac.compare_digest(admin.encode(), participant.encode()):
        raise ConfigError("the admin token and the participant token must differ")
    return Tokens(admin=admin, participant=participant)
