"""The results table across runs: read it back from the README, and merge fresh rows into it.

A partial run (``python -m benchmarks --only spark --keep-others``, or ``python -m benchmarks.bench_shared
--only "<workload>" --write-readme``) re-measures some rows; the rest of the table must stay as it was. The
saved ``results.json`` is not in the repo, so on a fresh checkout the README's own table is the previous run:
``readme_rows`` parses it back (the inverse of ``common.markdown_table``; a value printed as ``1,436`` reads
1436.0, ``n/a`` reads nan).

Two ways to merge (``merge``):
- by section (a whole module re-run): every row of a section that has fresh rows is replaced by them, in the
  place of its first row;
- by row (some workloads of a module re-run): a row with a fresh row of the same name is replaced in place; a
  fresh row with a new name goes after the last row that shares its label (the name up to ``": "``), else
  after the last row of its section. A row that compares ours with a peer (``ours - redis``) goes when the fresh
  rows re-measure ours or that peer on its workload without it (``stale_comparison``): it would set the fresh
  medians beside runs of another hour.

The caption keeps the full run's date and lists what was re-measured since, and when (``remeasured``: "Some rows
re-measured: the shared rows 2026-11-27 20:24-21:11 UTC; the quota rows ..."), the newest first; a part
re-measured again replaces its own entry, and an entry of some of a module's workloads (``shared (a / b)``) keeps
only those no newer entry re-measured where it did (``on local[2]``, ``on the cluster``; an entry that names no
place measured both): one whose workloads were all re-measured since goes. An entry that describes its runs as
``the same`` as the newer one before it keeps that description when that one goes.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .common import MarkersMissing, markdown_table, marker_lines, write_readme

__all__ = ["readme_rows", "merge", "readme_caption", "remeasured", "measured_span", "stale_comparison",
           "write_rows_into_readme"]

_OK = {"yes": True, "MISSED": False, "-": None}
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    inner = line.strip()
    if not (inner.startswith("|") and inner.endswith("|")):
        return []
    # one space pads each side of a cell; more is the text's own (an indented "  the same, ..." row)
    return [(c[1:-1] if len(c) >= 2 and c[0] == c[-1] == " " else c.strip()).replace("\\|", "|")
            for c in _CELL_SPLIT.split(inner[1:-1])]


def _value(text: str) -> float:
    if text == "n/a":
        return math.nan
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise ValueError(f"the README's table has a value that is not a number: {text!r}") from None


def _table_lines(text: str) -> list[str]:
    lines = text.splitlines()
    try:
        start, end = marker_lines(lines)
    except MarkersMissing:
        return []
    return lines[start + 1:end]


def readme_rows(text: str) -> list[dict[str, Any]]:
    """The rows of the results table between the README's bench markers ([] when there is none)."""
    rows = []
    for line in _table_lines(text):
        cells = _cells(line)
        if len(cells) != 7 or cells[0] == "section" or set(cells[2]) <= set("-:"):
            continue
        section, name, value, unit, goal, met, note = cells
        if met not in _OK:
            raise ValueError(f"the README's table has a 'met' cell that is not yes, MISSED or -: {met!r}")
        rows.append({"section": section, "name": name, "value": _value(value), "unit": unit, "goal": goal,
                     "ok": _OK[met], "note": note})
    return rows


def readme_caption(text: str) -> str:
    """The caption line of the README's table (without its underscores), or ''."""
    for line in _table_lines(text):
        if line.startswith("_") and line.rstrip().endswith("_"):
            return line.strip()[1:-1]
    return ""


def _label(name: str) -> str:
    return name.split(": ", 1)[0]


def merge(previous: Sequence[dict[str, Any]], fresh: Sequence[dict[str, Any]], by: str = "section"
          ) -> list[dict[str, Any]]:
    """``previous`` with ``fresh`` merged in, ``by`` "section" or "row" (see the module doc)."""
    if by not in ("section", "row"):
        raise ValueError(f"by must be 'section' or 'row', got {by!r}")
    if by == "section":
        sections = {r["section"] for r in fresh}
        out: list[dict[str, Any]] = []
        placed = False
        for old in previous:
            if old["section"] in sections:
                if not placed:
                    out += fresh
                    placed = True
                continue
            out.append(dict(old))
        return out if placed else out + list(fresh)
    out = [dict(r) for r in previous]
    for new in fresh:
        same = [i for i, r in enumerate(out) if r["section"] == new["section"] and r["name"] == new["name"]]
        if same:
            out[same[0]] = dict(new)
            continue
        near = ([i for i, r in enumerate(out) if r["section"] == new["section"] and _label(r["name"]) == _label(new["name"])]
                or [i for i, r in enumerate(out) if r["section"] == new["section"]])
        out.insert(near[-1] + 1 if near else len(out), dict(new))
    return out


_WHERE = r"local\[\d+\]|the cluster"
_PLACE = re.compile(rf"on ({_WHERE}) ")
_REMEASURED = re.compile(r" ?Some rows re-measured:? (.*)\.$")
_ENTRY = re.compile(rf"the (.+?) rows ((?:{_PLACE.pattern})?\d{{4}}-\d\d-\d\d.*)")
# between two entries: "; " before the next one's "the <what> rows [on <place> ]<date>" (a description may hold "; ";
# the place not captured: re.split would put its group among the entries)
_BETWEEN = re.compile(rf"; (?=the [^;]+? rows (?:on (?:{_WHERE}) )?\d{{4}}-\d\d-\d\d)")


def caption_place(where: str) -> str:
    """How the caption names a place a workload ran (``local[2]``, ``cluster``): ``local[2]``, ``the cluster``."""
    return "the cluster" if where == "cluster" else where


def remeasured(caption: str, what: str, when: str, rows: Iterable[dict[str, Any]] = ()) -> str:
    """``caption`` saying that ``what``'s rows (a module's, several modules' -- ``demo and replicas`` -- or some of
    one module's workloads') were re-measured ``when``: the full run's caption stays, with its date, and so does
    every other entry of its list of rows re-measured since; an entry for the same rows is replaced, and so are
    those for some workloads of a module ``what`` re-measured whole (``shared (...)``); an entry of several modules
    some of which ``what`` re-measured keeps the others (``demo and replicas``, ``demo`` re-measured: ``replicas``);
    the new one comes first. ``rows``: the table's, which tell where each workload runs (an entry that names no
    place measured it wherever the table has it; without rows, on ``local[2]`` and on the cluster)."""
    found = _REMEASURED.search(caption)
    base = caption[:found.start()] if found else caption
    entries: list[tuple[str | None, str]] = []
    if found:
        listed = found.group(1)
        parts = _BETWEEN.split(listed) if "; " in listed else re.split(r", (?=the )", listed)
        for part in parts:
            entry = _ENTRY.fullmatch(part)
            entries.append((entry.group(1), entry.group(2)) if entry else (None, part))
    kept, gone = [(what, when)], _modules(what)
    # a whole module in one place (``--where local[2]``): what the entries say of its rows elsewhere stays
    here = _PLACE.match(when) if " (" not in what else None
    for w, t in _spelled_out(entries):
        workloads = _WORKLOADS.fullmatch(w or "")
        if workloads and (_WORKLOADS.fullmatch(what) or (here and workloads.group(1) in gone)):
            kept.append((w, t))   # (some workloads of a module after some: by workload and place, below)
            continue
        if here and w == what:
            there = _PLACE.match(t)
            if there is None:   # (it measured both places: it still says when the other's rows were)
                kept += [(w, f"on {place} {t}") for place in ("local[2]", "the cluster") if place != here.group(1)]
            elif there.group(1) != here.group(1):
                kept.append((w, t))
            continue
        if w is not None and w != what:   # (a module's workloads go with the module: "shared (...)" with "shared")
            w = " and ".join(m for m in _modules(w) if m not in gone and m.split(" (")[0] not in gone)
        if w != what and w != "":
            kept.append((w, t))
    listed = "; ".join(t if w is None else f"the {w} rows {t}"
                       for w, t in _same_again(_without_superseded(kept, _places(rows))))
    return f"{base} Some rows re-measured: {listed}.".strip()


_WORKLOADS = re.compile(r"(\w+) \((.+)\)")
_SAME = ", the same"


def _places(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """(module, workload) -> where the table has its rows (``<workload> [<kind>, <where>]: ...``), as the caption
    says it (``local[2]``, ``the cluster``)."""
    out: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        if parts := workload_kind_where(r["name"]):
            out.setdefault((r["section"], parts[0]), set()).add(caption_place(parts[2]))
    return out


def workload_kind_where(name: str) -> tuple[str, str | None, str] | None:
    """A row name's workload, kind (None for a comparison's row) and place: ``<workload> [<kind>, <where>]: ...``
    or ``<workload> [<where>]: ...``; None for a name of neither form."""
    m = re.fullmatch(r"(.+) \[(?:([^,\]]+), )?(.+?)\]: .+", name)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def _without_superseded(entries: list[tuple[str | None, str]], places: dict[tuple[str, str], set[str]]
                        ) -> list[tuple[str | None, str]]:
    """``entries`` (newest first) less the workloads of a module (``shared (a / b)``) that a newer entry
    re-measured where this one measured them (see the module doc); an entry left with none goes."""
    out: list[tuple[str | None, str]] = []
    done: set[tuple[str, str, str | None]] = set()   # (module, workload, place or None for both)
    for what, when in entries:
        parts = _WORKLOADS.fullmatch(what) if what is not None else None
        place = _PLACE.match(when)
        where = place.group(1) if place else None
        if parts is None:
            out.append((what, when))
            if what is not None:   # (a whole module: every workload of it, where it says)
                done.update((module, "*", where) for module in _modules(what))
            continue
        module, names = parts.group(1), parts.group(2).split(" / ")
        left = [n for n in names if not _measured_since(done, module, n, where, places)]
        done.update((module, n, where) for n in names)
        if left:
            out.append((f"{module} ({' / '.join(left)})", when))
    return out


def _description(when: str) -> str:
    """What an entry says of its runs after its time (``, ours and Redis taking turns``), or ''."""
    return when.split(" UTC", 1)[1] if " UTC" in when else ""


def _spelled_out(entries: list[tuple[str | None, str]]) -> list[tuple[str | None, str]]:
    """``entries`` (newest first) with ``, the same`` written out as the description of the entry before it."""
    out: list[tuple[str | None, str]] = []
    for what, when in entries:
        if _description(when) == _SAME and out:
            when = when.removesuffix(_SAME) + _description(out[-1][1])
        out.append((what, when))
    return out


def _measured_since(done: set[tuple[str, str, str | None]], module: str, name: str, where: str | None,
                    places: dict[tuple[str, str], set[str]]) -> bool:
    """Was ``module``'s workload ``name`` re-measured by a newer entry wherever an entry of ``where`` (None: where
    the table has it) measured it?"""
    def done_in(w: str | None) -> bool:
        return (module, name, w) in done or (module, "*", w) in done
    if done_in(where) or done_in(None):
        return True
    return where is None and all(done_in(w) for w in places.get((module, name), {"local[2]", "the cluster"}))


def _same_again(entries: list[tuple[str | None, str]]) -> list[tuple[str | None, str]]:
    """An entry whose description is the one of the entry kept before it says ``, the same`` again."""
    out, before = [], None
    for what, when in entries:
        desc = _description(when)
        out.append((what, when.removesuffix(desc) + _SAME if desc and desc == before else when))
        before = desc
    return out


def measured_span(started: str, now: datetime.datetime | None = None) -> str:
    """``started`` ("2026-11-27 20:24 UTC") to now: "2026-11-27 20:24-21:11 UTC" (the end's date too if another
    day)."""
    end = now or datetime.datetime.now(datetime.UTC)
    day, at = started.removesuffix(" UTC").split(" ")
    return f"{day} {at}-{end:%H:%M} UTC" if end.strftime("%Y-%m-%d") == day else f"{started} - {end:%Y-%m-%d %H:%M} UTC"


def _modules(what: str) -> list[str]:
    """The modules (or one module's workloads, ``shared (...)``) an entry of the caption's list names."""
    return [what] if " (" in what else what.split(" and ")


def stale_comparison(fresh: Iterable[dict[str, Any]]) -> Callable[[dict[str, Any]], bool]:
    """A test of a table's earlier rows: is it an ``ours - <peer>`` row (``benchmarks.shared.workloads``'
    ``against_redis``: ``<workload> [<where>]: <figure>, ours - <peer>``) whose ours or peer ``fresh`` re-measured
    (its rows ``<workload> [<kind>, <where>]: ...``), but not that row itself? Its figures are then another
    hour's, and the row beside the fresh medians would compare two runs never run side by side: merged, it goes."""
    fresh = list(fresh)
    names = {r["name"] for r in fresh}
    measured = {(r["section"], *parts) for r in fresh
                if (parts := workload_kind_where(r["name"])) and parts[1] is not None}

    def stale(r: dict[str, Any]) -> bool:
        m = re.fullmatch(r"(.+) \[(.+?)\]: .+, ours - (.+)", r["name"])
        if not m or r["name"] in names:
            return False
        name, where, peer = m.groups()
        return any((r["section"], name, kind, where) in measured for kind in ("ours", peer))
    return stale


def write_rows_into_readme(readme: Path, fresh: Sequence[dict[str, Any]], when: str, what: str,
                           stale: Callable[[dict[str, Any]], bool] | None = None) -> None:
    """Merge ``fresh`` into the README's table by row, less the earlier rows ``stale`` says the fresh ones left
    without meaning; its caption says that ``what``'s rows were re-measured ``when`` (``remeasured``)."""
    text = readme.read_text(encoding="utf-8")
    rows = merge([r for r in readme_rows(text) if not (stale and stale(r))], fresh, by="row")
    write_readme(readme, markdown_table(rows, remeasured(readme_caption(text), what, when, rows)))
