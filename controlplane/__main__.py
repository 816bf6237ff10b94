"""``python -m controlplane [--host H] [--port P] [--data-dir D] [--report-interval S] [--open-reads]`` serves;
``python -m controlplane principals ...`` manages principals of a running one (see cli.py)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence

# seconds an idle kept-alive connection stays open: far longer than a participant keeps one
# (``collectors.client.KEEPALIVE_EXPIRY_S``, 50 s). At uvicorn's default, 5 s, the same as the participant's then, a
# request could cross the server's close and be reset: a grant ask failed with "Connection reset by peer" in a
# benchmark
KEEP_ALIVE_S = 120


def main(argv: Sequence[str] | None = None) -> int:
    from controlplane import cli
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in cli.COMMANDS:
        return cli.main(args)
    return serve(args)


def serve(argv: Sequence[str]) -> int:
    from controlplane.auth import load_tokens
    from controlplane.config import ConfigError, parse_settings
    from controlplane.store import StoreError

    try:
        settings = parse_settings(argv)
        try:
            settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create the data directory {str(settings.data_dir)!r}: {e.strerror}") from None
        if not os.access(settings.data_dir, os.W_OK | os.X_OK):
            raise ConfigError(f"the data directory {str(settings.data_dir)!r} is not writable")
        tokens = load_tokens(settings.data_dir, settings.admin_token, settings.token)
        import uvicorn

        from controlplane.app import create_app
        from controlplane.heap import HeapFreezer
        app = create_app(settings, tokens)
    except (ConfigError, StoreError) as e:
        print(f"throttlescope control plane: {e}", file=sys.stderr)
        return 2
    replicas = f", grants in {settings.redis_url}" if settings.redis_url else ""
    print(f"throttlescope control plane: serving on http://{settings.host}:{settings.port} "
          f"(data in {settings.data_dir}, report interval {settings.report_interval_s:g}s, "
          f"reads {'open' if settings.open_reads else 'need a token'}{replicas}"
          f"{', port shared (SO_REUSEPORT)' if settings.reuse_port else ''})", file=sys.stderr, flush=True)
    HeapFreezer().start()   # no pause of the cyclic garbage collector on the report path (see heap.py)
    # one line per participant report per second drowns everything else; debug shows them
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                            access_log=settings.log_level == "debug", timeout_keep_alive=KEEP_ALIVE_S)
    server = uvicorn.Server(config)
    if not settings.reuse_port:
        server.run()
        return 0
    try:
        sock = shared_port_socket(settings.host, settings.port)
    except OSError as e:
        print(f"throttlescope control plane: cannot bind {settings.host}:{settings.port} with SO_REUSEPORT: "
              f"{e.strerror}", file=sys.stderr)
        return 2
    server.run(sockets=[sock])
    return 0


def shared_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port with SO_REUSEPORT: every replica on this host binds the same one, and
    the kernel spreads new connections over them; a replica that dies leaves the others serving the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


if __name__ == "__main__":
    sys.exit(main())
