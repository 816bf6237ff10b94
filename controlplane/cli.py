"""``python -m controlplane principals list|create|revoke|whoami``: manage principals through the admin API.

As with ``pulsar-admin``, the command is a client of the running control plane, so every change it makes is
authorised and audited like any other, under the name of the principal whose token it uses:

    python -m controlplane principals create ana --role tenant-admin --tenant acme   # prints ana's token
    python -m controlplane principals create dashboard --role proxy
    python -m controlplane principals revoke ana                                     # refused from now on
    python -m controlplane principals list

Where: ``--url``, else THROTTLESCOPE_URL, else http://127.0.0.1:8000. Whose token: ``--token-file``, else
THROTTLESCOPE_ADMIN_TOKEN, else ``admin.token`` in ``--data-dir`` (THROTTLESCOPE_DATA_DIR, default ./data): the
bootstrap super-user, so ``make run`` users need no set-up. ``create`` prints the new token alone on stdout (so
``TOKEN=$(python -m controlplane principals create ...)`` captures it) and what it did on stderr; ``--tenant``
adds the principal to that tenant's ``adminRoles``, creating the tenant when it does not exist.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import httpx

from controlplane.models import RoleName
from protocol.settings import ConfigError, ControlPlaneAccess

__all__ = ["COMMANDS", "main"]

COMMANDS = ("principals",)
ROLES = RoleName.__args__  # type: ignore[attr-defined]


class CliError(RuntimeError):
    """A refusal or failure, said in one line."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m controlplane principals",
                                description="Create, list and revoke the principals of a running control plane.")
    p.add_argument("--url", help="the control plane (default: THROTTLESCOPE_URL, else http://127.0.0.1:8000)")
    p.add_argument("--token-file", help="a super-user's token (default: THROTTLESCOPE_ADMIN_TOKEN, else "
                                        "<data dir>/admin.token)")
    p.add_argument("--data-dir", help="where admin.token is (default: THROTTLESCOPE_DATA_DIR, else ./data)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every principal, its role and the tenants it administers")
    sub.add_parser("whoami", help="the principal of the token used")
    create = sub.add_parser("create", help="a new principal; prints its token (shown only once)")
    create.add_argument("name")
    create.add_argument("--role", required=True, choices=ROLES)
    create.add_argument("--tenant", action="append", default=[],
                        help="(tenant-admin) a tenant it administers; repeat for more")
    revoke = sub.add_parser("revoke", help="refuse the principal's token from the next request on")
    revoke.add_argument("name")
    return p


FLAGS = {"url": "--url", "data_dir": "--data-dir"}


def _token(args: argparse.Namespace, settings: ControlPlaneAccess) -> str:
    if args.token_file:
        path = Path(args.token_file)
    elif settings.admin_token:
        return settings.admin_token
    else:
        path = settings.data_dir / "admin.token"
    try:
        return path.read_text().strip()
    except OSError as e:
        raise CliError(f"cannot read a token from {path} ({e.strerror}); give --token-file or "
                       "THROTTLESCOPE_ADMIN_TOKEN") from None


def _call(c: httpx.Client, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201, 204)) -> Any:
    try:
        r = c.request(method, path, json=body)
    except httpx.TransportError as e:
        raise CliError(f"cannot reach the control plane at {c.base_url} ({type(e).__name__}); start it, or give "
                       "--url") from None
    if r.status_code not in ok:
        try:
            reason = r.json()["reason"]
        except (ValueError, KeyError, TypeError):
            reason = r.text[:200]
        raise CliError(f"{method} {path}: HTTP {r.status_code}: {reason}")
    return r.json() if r.content else None


def _create(c: httpx.Client, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    if args.tenant and args.role != "tenant-admin":
        raise CliError("--tenant is for principals of role tenant-admin")
    made = _call(c, "PUT", f"/admin/v2/principals/{args.name}", {"role": args.role})
    print(f"created {args.role} {args.name!r}; its token (shown only this once) is on stdout", file=err)
    for tenant in args.tenant:
        info = _call(c, "GET", f"/admin/v2/tenants/{tenant}", ok=(200, 404))
        if info is None or "adminRoles" not in info:
            _call(c, "PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [args.name]})
        else:
            _call(c, "POST", f"/admin/v2/tenants/{tenant}", {**info, "adminRoles": [*info["adminRoles"], args.name]})
        print(f"{args.name!r} administers tenant {tenant!r}", file=err)
    print(made["token"], file=out, flush=True)


def main(argv: Sequence[str], env: Mapping[str, str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args = _parser().parse_args(list(argv)[1:])
    try:
        settings = ControlPlaneAccess.from_flags(args, FLAGS, env)
        headers = {"Authorization": f"Bearer {_token(args, settings)}"}
        with httpx.Client(base_url=settings.url or "", headers=headers, timeout=10) as c:
            if args.command == "create":
                _create(c, args, out, err)
            elif args.command == "revoke":
                _call(c, "DELETE", f"/admin/v2/principals/{args.name}")
                print(f"revoked {args.name!r}: its token is refused from now on", file=err)
            elif args.command == "whoami":
                me = _call(c, "GET", "/v1/whoami")
                tenants = f", admin of {', '.join(me['adminOf'])}" if me["adminOf"] else ""
                print(f"{me['name']} ({me['role']}{tenants})", file=out)
            else:
                for p in _call(c, "GET", "/admin/v2/principals"):
                    tenants = f" admin of {','.join(p['adminOf'])}" if p["adminOf"] else ""
                    print(f"{p['name']}\t{p['role']}{tenants}{'  (revoked)' if p['revoked'] else ''}", file=out)
    except (CliError, ConfigError) as e:
        print(f"throttlescope principals: {e}", file=err)
        return 1
    return 0
