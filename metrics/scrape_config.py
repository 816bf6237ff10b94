"""``python -m metrics.scrape_config``: deploy/prometheus.yml for the control plane this environment names.

deploy/prometheus.yml is written for the defaults: the control plane on 127.0.0.1:8000, its participant token in
``./data``, the rules beside the file. Prometheus expands no environment variables in its configuration, so a
control plane on another port or with another data directory (``THROTTLESCOPE_PORT``, ``THROTTLESCOPE_DATA_DIR``
under ``make run-observability``) would be scraped at the wrong address, with another token, and answer 403.
``make run-observability`` therefore starts Prometheus on this module's output: the shipped file with the target,
the token file and the rules' path replaced (absolute paths, so the output may live anywhere), nothing else
changed -- the shipped file stays the one reference, and a line this module no longer finds is an error, not a
file that silently scrapes the defaults.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

__all__ = ["DEPLOY", "scrape_target", "render", "main"]

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
# what the shipped file says for the defaults, each exactly once
_TARGET = 'targets: ["127.0.0.1:8000"]'
_TOKEN = "credentials_file: ../data/participant.token"
_RULES = "- rules/*.yml"


def scrape_target(host: str, port: int | str) -> str:
    """``host:port`` to scrape a control plane listening on ``host``: an address of every interface is scraped on
    loopback, an IPv6 address goes in brackets."""
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"the control plane's port must be a whole number 1-65535, got {port!r}") from None
    if not 1 <= number <= 65535:
        raise ValueError(f"the control plane's port must be a whole number 1-65535, got {port!r}")
    host = host.strip().strip("[]")
    if not host:
        raise ValueError("the control plane's host is empty: give a host name or an address, e.g. 127.0.0.1")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"{host}:{number}"   # a host name
    if address.is_unspecified:   # 0.0.0.0 / :: listen everywhere; loopback is one of them
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return f"[{address}]:{number}" if address.version == 6 else f"{address}:{number}"


def render(shipped: str, target: str, token_file: Path, rules_dir: Path) -> str:
    """The shipped configuration with its target, token file and rules' directory replaced."""
    out = shipped
    for old, new in ((_TARGET, f'targets: ["{target}"]'), (_TOKEN, f"credentials_file: {token_file.resolve()}"),
                     (_RULES, f"- {rules_dir.resolve() / '*.yml'}")):
        if out.count(old) != 1:
            raise ValueError(f"deploy/prometheus.yml no longer has {old!r} exactly once: this module replaces it")
        out = out.replace(old, new)
    return (f"# Written by python -m metrics.scrape_config from {DEPLOY / 'prometheus.yml'} for {target}: edit\n"
            f"# that file, not this one (make run-observability writes this one again at each start).\n{out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metrics.scrape_config", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="where the control plane listens (default %(default)s)")
    parser.add_argument("--port", default="8000", help="its port (default %(default)s)")
    parser.add_argument("--data-dir", default="data", type=Path,
                        help="its data directory, where its participant.token is (default %(default)s)")
    parser.add_argument("--out", required=True, type=Path, help="where to write the configuration")
    args = parser.parse_args(argv)
    try:
        target = scrape_target(args.host, args.port)
        text = render((DEPLOY / "prometheus.yml").read_text(encoding="utf-8"), target,
                      args.data_dir / "participant.token", DEPLOY / "rules")
    except ValueError as e:
        parser.error(str(e))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"prometheus configuration for {target} written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
