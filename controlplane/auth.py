"""The two bootstrap tokens, from the environment or the data directory.

Two bearer tokens (``Authorization: Bearer <token>``) exist from the first start, so that ``make run`` works with no
set-up:

- the *admin* token (THROTTLESCOPE_ADMIN_TOKEN) is the principal ``admin``, the first super-user;
- the *participant* token (THROTTLESCOPE_TOKEN) is the principal ``participant``, shared by the Spark workers.

A token not given in the environment is read from its file in the data directory (``admin.token``,
``participant.token``), or generated with ``secrets`` at first start, written there with mode 0600 and printed
once to stderr, as Jupyter does. Tokens are never logged. ``principals.Directory`` turns them into principals
(beside the ones super-users create) and ``access.py`` decides what each may do.
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
from typing import TextIO

from controlplane.config import ConfigError

ADMIN_TOKEN_FILE = "admin.token"
PARTICIPANT_TOKEN_FILE = "participant.token"
MIN_TOKEN_LEN = 16
MAX_TOKEN_LEN = 1024


@dataclass(frozen=True)
class Tokens:
    admin: str = field(repr=False)
    participant: str = field(repr=False)


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
