"""``python -m collectors <job> [options]``: run one of the Spark jobs (publish, dispatch, offload, mutation).

Every job takes ``--master`` (default ``local[2]``), ``--url`` / ``--token`` (default: THROTTLESCOPE_URL /
THROTTLESCOPE_TOKEN; without a URL the limiters enforce no control-plane limits), ``--duration-s`` (a bound on
the run), ``--partitions``, ``--conf KEY=VALUE`` (any Spark setting, repeatable) and ``--json``; its own options
are in ``python -m collectors <job> --help``. The job prints its summary (``--json``: as JSON) and exits 0; a bad
option or value exits 2 with a message, a failed job 1.

Examples::

    python -m collectors publish --duration-s 30                        # rate source, demo tenants, files
    python -m collectors publish --source files --input in/ --generate 5000 --output out/
    python -m collectors dispatch --backlog backlog/ --generate 2000 --subscriptions etl,audit
    python -m collectors offload --hot hot/ --cold cold/ --generate 20 --ledger-bytes 1000000
    python -m collectors mutation --root catalog/ --tables 4 --days 7 --client-id etl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser", "DEFAULT_OUTPUT"]

DEFAULT_OUTPUT = Path("throttlescope-output")
JOBS = ("publish", "dispatch", "offload", "mutation")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number > 0, got {text!r}")
    return value


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("give at least one name (comma-separated)")
    return names


def _weights(text: str) -> tuple[int, ...]:
    return tuple(_positive_int(part) for part in _names(text))


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _common(p: argparse.ArgumentParser, duration_help: str) -> None:
    g = p.add_argument_group("Spark and the control plane")
    g.add_argument("--master", default="local[2]",
                   help="Spark master: local[N], spark://host:port, ... (default %(default)s); the driver of a master "
                        "on this machine listens on loopback only, unless SPARK_LOCAL_IP says where")
    g.add_argument("--app-name", help="Spark application name (default throttlescope-<job>)")
    g.add_argument("--url", default=os.environ.get("THROTTLESCOPE_URL"),
                   help="control plane URL (default $THROTTLESCOPE_URL; none: no control-plane limits)")
    g.add_argument("--token", default=os.environ.get("THROTTLESCOPE_TOKEN"),
                   help="participant token (default $THROTTLESCOPE_TOKEN)")
    g.add_argument("--conf", type=_conf, action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting (repeatable)")
    g.add_argument("--duration-s", type=_positive_float, help=duration_help)
    g.add_argument("--partitions", type=_positive_int, help="Spark tasks (default: the default parallelism)")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m collectors", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="job", required=True, metavar="{" + ",".join(JOBS) + "}")

    p = sub.add_parser("publish", help="a multi-tenant workload through the publish limiters to a sink")
    _common(p, "run time (source rate: default 20 s; source files: an upper bound, default none)")
    p.add_argument("--source", choices=("rate", "files"), default="rate", help="default %(default)s")
    p.add_argument("--input", help="Parquet dataset (id, topic, payload) for --source files")
    p.add_argument("--generate", type=_positive_int, metavar="N", help="first write N demo records per topic to --input")
    p.add_argument("--output", default=str(DEFAULT_OUTPUT / "publish"), help="output directory (default %(default)s)")
    p.add_argument("--sink", default="files", help="'files' (default) or an http(s):// endpoint")
    p.add_argument("--topics", type=_names, help="tenant/namespace/topic,... (default: the demo topics)")
    p.add_argument("--rows-per-batch", type=_positive_int, default=2000, help="rate source rows per micro-batch")
    p.add_argument("--topic-weights", type=_weights, metavar="W,W,...",
                   help="rate source: records per topic in these proportions, one whole number per topic "
                        "(default: equal; give each topic's limit to keep every limit busy)")
    p.add_argument("--payload-bytes", type=_positive_int, default=200, help="payload size (rate source, --generate)")
    p.add_argument("--producers-per-topic", type=_positive_int, default=2, help="keyed producers (threads) per topic per task")
    p.add_argument("--batch-rows", type=_positive_int, default=None,
                   help="records per acquire (default 25: each worker sharing a limit may run up to one acquire "
                        "ahead, so a send should be a small part of the tightest limit's second)")

    p = sub.add_parser("dispatch", help="read a backlog as subscriptions under the dispatch limiters")
    _common(p, "run time bound (default 30 s)")
    p.add_argument("--backlog", required=True, help="directory <tenant>/<namespace>/<topic>/partition-<k>.parquet")
    p.add_argument("--generate", type=_positive_int, metavar="ENTRIES", help="first write a demo backlog of ENTRIES entries per partition")
    p.add_argument("--output", default=str(DEFAULT_OUTPUT / "dispatch"), help="default %(default)s")
    p.add_argument("--subscriptions", type=_names, default=("sub",), help="comma-separated (default sub)")
    p.add_argument("--permits", type=_positive_int, default=1000, help="consumer flow permits (default %(default)s)")
    p.add_argument("--read-batch-size", type=_positive_int, default=100, help="dispatcherMaxReadBatchSize")
    p.add_argument("--precise", action=argparse.BooleanOptionalAction, help="precise flow control (default: broker setting)")
    p.add_argument("--count-entries", action=argparse.BooleanOptionalAction, help="batch counting (default: broker setting)")
    p.add_argument("--backoff-s", type=_positive_float, default=0.05, help="retry delay of a throttled read")

    p = sub.add_parser("offload", help="copy ledgers hot -> cold under the offload flow permits")
    _common(p, "run time bound (default none)")
    p.add_argument("--hot", required=True, help="directory of ledgers to offload")
    p.add_argument("--cold", required=True, help="destination directory")
    p.add_argument("--pattern", default="*", help="ledger file glob (default %(default)s)")
    p.add_argument("--chunk-bytes", type=_positive_int, default=64 * 1024, help="bytes per read")
    p.add_argument("--delete-source", action="store_true", help="remove each hot ledger after a verified copy")
    p.add_argument("--generate", type=_positive_int, metavar="COUNT", help="first write COUNT demo ledgers to --hot")
    p.add_argument("--ledger-bytes", type=_positive_int, default=1_000_000, help="size of generated ledgers")

    p = sub.add_parser("mutation", help="create partition directories under a mutation quota")
    _common(p, "run time bound (default none)")
    p.add_argument("--root", default=str(DEFAULT_OUTPUT / "catalog"), help="default %(default)s")
    for name, default in (("tables", 4), ("days", 7), ("hours", 24), ("per-request", 1)):
        p.add_argument(f"--{name}", type=_positive_int, default=default, help=f"default {default}")
    p.add_argument("--first-day", default="2024-01-01", help="YYYY-MM-DD (default %(default)s)")
    p.add_argument("--user", default="spark", help="quota user (default %(default)s)")
    p.add_argument("--client-id", default="throttlescope-mutation", help="quota client id (default %(default)s)")
    p.add_argument("--timeout-s", type=_positive_float, default=60.0, help="give up retrying after (default 60)")
    return parser


def _config(args: argparse.Namespace) -> Any:
    """The job's config (raises ValueError on a bad combination); writes demo input when asked to."""
    from collectors import jobs

    if args.job == "publish":
        if args.generate:
            if not args.input:
                raise ValueError("--generate needs --input (where to write the records)")
            jobs.make_input(args.input, dict.fromkeys(args.topics or jobs.DEMO_TOPICS, args.generate),
                            payload_bytes=args.payload_bytes)
        if args.input and args.source == "files" and not Path(args.input).exists():
            raise ValueError(f"--input {args.input!r} does not exist (--generate N writes a demo dataset)")
        duration = args.duration_s if args.duration_s or args.source == "files" else 20.0
        return jobs.PublishConfig(args.output, args.source, args.input, args.topics or jobs.DEMO_TOPICS, args.sink,
                                  duration, args.partitions, args.rows_per_batch, args.payload_bytes,
                                  args.producers_per_topic, args.batch_rows or jobs.PublishConfig.batch_rows,
                                  topic_weights=args.topic_weights)
    if args.job == "dispatch":
        if args.generate:
            jobs.make_backlog(args.backlog, {"acme/stream/orders": 1, "acme/stream/events": 2}, args.generate)
        return jobs.DispatchConfig(args.backlog, args.output, args.subscriptions, args.duration_s or 30.0,
                                   args.permits, args.read_batch_size, args.precise, args.count_entries,
                                   args.backoff_s)
    if args.job == "offload":
        if args.generate:
            jobs.make_ledgers(args.hot, args.generate, args.ledger_bytes)
        return jobs.OffloadConfig(args.hot, args.cold, args.pattern, args.chunk_bytes, args.duration_s,
                                  args.partitions, args.delete_source)
    return jobs.MutationConfig(args.root, args.tables, args.days, args.hours, args.first_day, args.user,
                               args.client_id, args.per_request, args.timeout_s, args.duration_s, args.partitions)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = _config(args)
    except (ValueError, OSError) as e:
        parser.error(f"{args.job}: {e}")
    from collectors.config import RuntimeConfig

    try:  # the participants' settings, checked here rather than inside every task after Spark has started
        RuntimeConfig.from_env()
    except ValueError as e:
        parser.error(str(e))
    from collectors import jobs
    from collectors.jobs.common import format_summary, spark_session

    run = {"publish": jobs.run_publish, "dispatch": jobs.run_dispatch, "offload": jobs.run_offload,
           "mutation": jobs.run_mutation}[args.job]
    app = args.app_name or f"throttlescope-{args.job}"
    if not args.url:
        print("note: no control plane (--url / THROTTLESCOPE_URL): only local limits apply", file=sys.stderr)
    env = {} if os.environ.get("THROTTLESCOPE_APP_ID") else {"THROTTLESCOPE_APP_ID": f"{app}-{int(time.time())}"}
    spark = spark_session(args.master, app, args.url, args.token, dict(args.conf), **env)
    try:
        summary = run(spark, config)
    except ValueError as e:
        print(f"error: {args.job}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - one line for the operator, the traceback is in Spark's log
        print(f"error: the {args.job} job failed: {type(e).__name__}: {str(e).strip()[:2000]}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    summary.pop("events", None)
    print(json.dumps(summary, indent=2, default=str) if args.json else format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
