"""``python -m controlplane [--host H] [--port P] [--data-dir D] [--report-interval S] [--open-reads]``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
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
        tokens = load_tokens(settings.data_dir)
        import uvicorn

        from controlplane.app import create_app
        app = create_app(settings, tokens)
    except (ConfigError, StoreError) as e:
        print(f"throttlescope control plane: {e}", file=sys.stderr)
        return 2
    print(f"throttlescope control plane: serving on http://{settings.host}:{settings.port} "
          f"(data in {settings.data_dir}, report interval {settings.report_interval_s:g}s, "
          f"reads {'open' if settings.open_reads else 'need a token'})", file=sys.stderr, flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                # one line per participant report per second drowns everything else; debug shows them
                access_log=settings.log_level == "debug")
    return 0


if __name__ == "__main__":
    sys.exit(main())
