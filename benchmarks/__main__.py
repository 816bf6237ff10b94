"""``python -m benchmarks [--quick] [--only NAME ... [--keep-others]] [--write-readme]``: run every
``benchmarks/bench_*.py``.

Each module exposes ``run(quick: bool = False) -> list[dict]`` (a module whose ``run`` takes no ``quick``, or
that has only ``main()``, is called through what it has). The rows are printed as a table, saved as JSON
(``benchmarks/results.json``) and, with ``--write-readme``, written into README.md between the lines
``<!-- bench:start -->`` and ``<!-- bench:end -->``. A partial run (``--only``) writes it only with
``--keep-others``, which merges its rows into the table (``benchmarks/table.py``); without, it refuses before
measuring (its few rows would replace the whole table). A module that fails becomes a failed row; the others
still run, and the exit status is 1. Missed goals are reported, not treated as failures.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import pkgutil
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .common import (
    MarkersMissing,
    caption,
    machine,
    markdown_table,
    normalise,
    replace_between_markers,
    row,
    text_table,
    write_readme,
)
from .table import measured_span, merge, readme_caption, readme_rows, remeasured

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_JSON = PACKAGE_DIR / "results.json"
DEFAULT_README = PACKAGE_DIR.parent / "README.md"


# the table's reading order; others follow. Spark's wall-clock pairs run before the multi-process load and churn
# runs, not on a machine still settling after a thousand participants.
ORDER = ("bucket", "threads", "accuracy", "fairness", "dispatch", "spark")


def discover() -> list[str]:
    """The short names (``bucket`` for ``bench_bucket``) of every benchmark module: ORDER first, then by name."""
    names = {m.name.removeprefix("bench_") for m in pkgutil.iter_modules([str(PACKAGE_DIR)])
             if m.name.startswith("bench_")}
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def call_run(module: ModuleType, quick: bool) -> Any:
    """``run(quick=...)`` if the module has it, else ``run()`` with its defaults, else ``main()``."""
    fn = getattr(module, "run", None)
    if callable(fn):
        params = inspect.signature(fn).parameters
        if "quick" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return fn(quick=quick)
        if all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values()):
            return fn()
    fn = getattr(module, "main", None)
    if callable(fn):
        return fn()
    raise TypeError(f"{module.__name__} has neither run(quick=False) nor run() nor main()")


def run_one(name: str, quick: bool) -> tuple[list[dict[str, Any]], bool]:
    """The rows of one module, and whether it ran; a failure is one failed row (traceback on stderr)."""
    try:
        module = importlib.import_module(f"{__package__}.bench_{name}")
        result = call_run(module, quick)
        if not isinstance(result, list) or not all(isinstance(r, dict) for r in result):
            raise TypeError(f"run() returned {type(result).__name__}, not a list of dicts")
        return [normalise(name, r) for r in result], True
    except Exception as exc:  # noqa: BLE001 - one broken module must not stop the others
        traceback.print_exc(file=sys.stderr)
        return [row(name, f"bench_{name} failed: {type(exc).__name__}: {exc}", math.nan, "", "", False,
                    "see the traceback on stderr")], False


def previous_rows(saved: Path, readme: Path) -> list[dict[str, Any]]:
    """The table as it stands: per section, the README's own rows, else those saved in ``saved`` (a section the
    README does not show); in the README's order, then the sections only saved. The README first: a module run
    and written into the README alone (``bench_shared --write-readme``) leaves an older run's rows of it in
    results.json, and a later partial run of another module that preferred those wrote them back over the
    newer ones."""
    kept: list[dict[str, Any]] = []
    try:
        rows = json.loads(saved.read_text(encoding="utf-8"))["rows"]
        kept = [{k: (math.nan if v is None and k == "value" else v) for k, v in r.items()} for r in rows]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        shown = readme_rows(readme.read_text(encoding="utf-8"))
    except OSError:
        shown = []
    placed = {r["section"] for r in shown}
    return shown + [r for r in kept if r["section"] not in placed]


def merged_with_previous(saved: Path, rows: list[dict[str, Any]], readme: Path = DEFAULT_README
                         ) -> list[dict[str, Any]]:
    """The last run's rows (``previous_rows``) with the sections in ``rows`` replaced by ``rows``."""
    return merge(previous_rows(saved, readme), rows, by="section")


def _json_safe(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorten every measurement (a smoke run)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this module (bucket, threads, ...; repeat or comma-separate for more)")
    parser.add_argument("--write-readme", action="store_true", help="write the table into README.md")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"where to save (default {DEFAULT_JSON})")
    parser.add_argument("--readme", type=Path, default=DEFAULT_README, help=argparse.SUPPRESS)
    parser.add_argument("--keep-others", action="store_true",
                        help="with --only: keep the other modules' rows as the README's table shows them (a module "
                             "it lacks: from the last saved results; the table then holds rows of several runs, and "
                             "its caption's date is this run's)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names = discover()
    if args.only:
        wanted = [w.strip().removeprefix("bench_") for arg in args.only for w in arg.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in names]
        if unknown:
            print(f"no benchmark module named {', '.join(unknown)}; there are: {', '.join(names)}", file=sys.stderr)
            return 2
        names = [n for n in names if n in wanted]
        if args.write_readme and not args.keep_others:   # (the other modules' rows would be lost from the table)
            print("--only with --write-readme would replace the README's whole table with these modules' rows: "
                  "add --keep-others to merge them into it, or leave out --only to run every module",
                  file=sys.stderr)
            return 2
    if args.write_readme:  # say so before spending minutes measuring
        try:
            replace_between_markers(args.readme.read_text(encoding="utf-8"), "")
        except (OSError, MarkersMissing) as exc:
            print(f"cannot write the table into {args.readme}: {exc}", file=sys.stderr)
            return 2

    info = machine()
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    started = time.perf_counter()
    for name in names:
        t = time.perf_counter()
        print(f"running bench_{name}{' (quick)' if args.quick else ''} ...", file=sys.stderr, flush=True)
        got, ok = run_one(name, args.quick)
        rows += got
        if not ok:
            failed.append(name)
        print(f"  bench_{name}: {len(got)} row(s) in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - started

    title = caption(info, args.quick)
    print(title)
    print(text_table(rows))
    missed = [r for r in rows if r["ok"] is False]
    print(f"{len(rows)} rows from {len(names)} module(s) in {elapsed:.1f} s; "
          f"{sum(r['ok'] is True for r in rows)} goal(s) met, {len(missed)} missed or failed")

    if args.only and args.keep_others:
        rows = merged_with_previous(args.json, rows, args.readme)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": info, "quick": args.quick, "elapsed_s": round(elapsed, 1),
                                     "modules": names, "failed": failed, "rows": _json_safe(rows)}, indent=2) + "\n",
                         encoding="utf-8")
    if args.write_readme:
        try:
            if args.only and args.keep_others:   # the full run's caption stays; it says when these rows were measured
                title = remeasured(readme_caption(args.readme.read_text(encoding="utf-8")), " and ".join(names),
                                   measured_span(info["date"]))
            write_readme(args.readme, markdown_table(rows, title))
        except (OSError, MarkersMissing) as exc:
            print(f"cannot write the table into {args.readme}: {exc}", file=sys.stderr)
            return 2
        print(f"table written into {args.readme}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join('bench_' + n for n in failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
