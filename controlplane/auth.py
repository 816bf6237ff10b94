"""The two bootstrap tokens, from the environment or the data directory.

Two bearer tokens (``Authorization: Bearer <token>``) exist from the first start, so that ``make run`` works with no
set-up:

- the *admin* token (THROTTLESCOPE_ADMIN_TOKEN) is the principal ``admin``, the first super-user;
- the *participant* token (THROTTLESCOPE_TOKEN) is the principal ``participant``, shared by the Spark workers.

The variables are read and checked with the other settings (``config.Settings``); a token not given there is read
from its file in the data directory (``admin.token``,
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from protocol.settings import ConfigError, token_problem

ADMIN_TOKEN_FILE = "admin.token"
PARTICIPANT_TOKEN_FILE = "participant.token"


@dataclass(frozen=True)
class Tokens:
    admin: str = field(repr=False)
    participant: str = field(repr=False)




def _load_or_create(path: Path, what: str, err: TextIO) -> str:
    try:
        st = path.stat()
    except FileNotFoundError:
        token = secrets.token_urlsafe(32)
        # written whole under a temporary name, then linked into place: replicas started together over one data
        # directory all find the one token whichever of them made it (an O_EXCL create let the others read the
        # file before its writer had filled it, or fail on it)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)
        except FileExistsError:   # another process made it first: its token it is
            return _load_or_create(path, what, err)
        finally:
            tmp.unlink(missing_ok=True)
        print(f"throttlescope control plane: generated a new {what} token, stored in {path} (mode 0600).\n"
              f"Send it as 'Authorization: Bearer <token>'. It is shown only this once:\n\n    {token}\n",
              file=err, flush=True)
        return token
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o600)
        print(f"throttlescope control plane: {path} was readable by others; its mode is now 0600", file=err)
    token = path.read_text().strip()
    problem = token_problem(token)
    if problem:
        raise ConfigError(f"{path} {problem}")
    return token


def load_tokens(data_dir: Path, admin: str | None = None, participant: str | None = None,
                err: TextIO | None = None) -> Tokens:
    """The tokens given (``Settings.admin_token``/``token``, already checked), else the ones in (or generated into)
    the data directory. Raises ConfigError."""
    err = sys.stderr if err is None else err
    admin = admin or _load_or_create(data_dir / ADMIN_TOKEN_FILE, "admin", err)
    participant = participant or _load_or_create(data_dir / PARTICIPANT_TOKEN_FILE, "participant", err)
    if hmac.compare_digest(admin.encode(), participant.encode()):
        raise ConfigError("the admin token and the participant token must differ")
    return Tokens(admin=admin, participant=participant)
