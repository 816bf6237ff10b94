"""The benchmark harness runs and its rows are well-formed; the README writer touches only its markers.

Timing goals are not asserted here: they belong to ``python -m benchmarks``, not to the test suite.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
from pathlib import Path

import pytest

from benchmarks import common
from benchmarks.__main__ import call_run, discover

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def assert_well_formed(rows: list[dict]) -> None:
    assert rows
    for r in rows:
        assert set(r) == set(common.ROW_KEYS), r
        assert isinstance(r["value"], float) and math.isfinite(r["value"]), r
        assert r["unit"] and r["name"] and r["section"], r
        assert isinstance(r["goal"], str) and isinstance(r["note"], str), r
        assert r["ok"] in (True, False, None), r
        assert (r["ok"] is None) == (r["goal"] == ""), r  # a verdict exactly when there is a goal


# --- smoke: real measurements, shortened -------------------------------------------------------------------

@pytest.mark.integration
def test_bucket_runs_in_process() -> None:
    from benchmarks import bench_bucket

    assert_well_formed(bench_bucket.run(quick=True))


@pytest.mark.integration
def test_runner_quick_only_bucket(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "bucket", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "consume_and_check(1)" in proc.stdout
    saved = json.loads(out.read_text())
    assert saved["quick"] is True and saved["modules"] == ["bucket"] and not saved["failed"]
    assert saved["machine"]["nproc"] and saved["machine"]["python"]
    assert_well_formed(saved["rows"])


def test_discover_finds_every_module() -> None:
    names = discover()
    assert {"bucket", "threads", "accuracy", "fairness"} <= set(names)
    assert names[0] == "bucket" and len(set(names)) == len(names)


# --- the runner's adapters -----------------------------------------------------------------------------------

def test_call_run_adapts_to_each_signature() -> None:
    quick_mod = types.ModuleType("m1")
    quick_mod.run = lambda quick=False: [{"quick": quick}]
    report_mod = types.ModuleType("m2")
    report_mod.run = lambda report=None: [{"report": report}]
    main_mod = types.ModuleType("m3")
    main_mod.main = lambda: [{"main": True}]
    assert call_run(quick_mod, True) == [{"quick": True}]
    assert call_run(report_mod, True) == [{"report": None}]
    assert call_run(main_mod, True) == [{"main": True}]
    with pytest.raises(TypeError):
        call_run(types.ModuleType("empty"), False)


def test_normalise_fills_missing_keys() -> None:
    r = common.normalise("dispatch", {"name": "x", "value": 1, "unit": "x limit", "goal": "0.95-1.05", "ok": True})
    assert r == {"section": "dispatch", "name": "x", "value": 1.0, "unit": "x limit", "goal": "0.95-1.05",
                 "ok": True, "note": ""}


def test_failing_module_becomes_a_failed_row(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import __main__ as runner

    broken = types.ModuleType("benchmarks.bench_broken")

    def run(quick: bool = False) -> list[dict]:
        raise RuntimeError("boom")

    broken.run = run
    monkeypatch.setitem(sys.modules, "benchmarks.bench_broken", broken)
    rows, ok = runner.run_one("broken", quick=True)
    assert not ok
    assert len(rows) == 1 and rows[0]["ok"] is False and "boom" in rows[0]["name"]


# --- Jain's index --------------------------------------------------------------------------------------------

def test_jain_index() -> None:
    assert common.jain_index([5, 5, 5, 5]) == 1.0
    assert common.jain_index([10, 0, 0, 0, 0]) == pytest.approx(1 / 5)
    assert common.jain_index([1, 2, 3]) == pytest.approx(36 / (3 * 14))
    assert common.jain_index([0, 0]) == 1.0
    with pytest.raises(ValueError):
        common.jain_index([])
    with pytest.raises(ValueError):
        common.jain_index([1, -1])


# --- the README writer ---------------------------------------------------------------------------------------

def test_readme_writer_replaces_only_between_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    before = "# title\n\ntext\n<!-- bench:start -->\nold table\nmore old\n<!-- bench:end -->\nafter\n"
    readme.write_text(before)
    common.write_readme(readme, "| new | table |\n")
    assert readme.read_text() == "# title\n\ntext\n<!-- bench:start -->\n| new | table |\n<!-- bench:end -->\nafter\n"
    common.write_readme(readme, "second\n")  # idempotent shape: markers stay, content replaced again
    assert readme.read_text() == "# title\n\ntext\n<!-- bench:start -->\nsecond\n<!-- bench:end -->\nafter\n"


def test_readme_writer_keeps_crlf(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_bytes(b"a\r\n<!-- bench:start -->\r\nold\r\n<!-- bench:end -->\r\nb\r\n")
    common.write_readme(readme, "x\ny")
    assert readme.read_bytes() == b"a\r\n<!-- bench:start -->\r\nx\r\ny\r\n<!-- bench:end -->\r\nb\r\n"


@pytest.mark.parametrize("text", [
    "# no markers\n",
    "<!-- bench:start -->\nonly a start\n",
    "<!-- bench:end -->\n<!-- bench:start -->\n",
    "<!-- bench:start -->\n<!-- bench:start -->\n<!-- bench:end -->\n",
])
def test_readme_writer_refuses_without_markers(tmp_path: Path, text: str) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(text)
    with pytest.raises(common.MarkersMissing):
        common.write_readme(readme, "table\n")
    assert readme.read_text() == text


def test_runner_write_readme_without_markers_exits_nonzero(tmp_path: Path) -> None:
    from benchmarks import __main__ as runner

    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    code = runner.main(["--only", "bucket", "--keep-others", "--write-readme", "--readme", str(readme), "--json",
                        str(tmp_path / "r.json")])
    assert code == 2
    assert readme.read_text() == "# no markers\n"
    assert not (tmp_path / "r.json").exists()  # refused before measuring anything


def test_runner_refuses_to_write_a_partial_runs_rows_as_the_whole_table(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import __main__ as runner

    readme = tmp_path / "README.md"
    text = f"# t\n{common.README_START}\n{common.markdown_table([common.row('s', 'a', 1.0, 'x')], 'c')}\n" \
           f"{common.README_END}\n"
    readme.write_text(text)
    code = runner.main(["--only", "bucket", "--write-readme", "--readme", str(readme), "--json",
                        str(tmp_path / "r.json")])
    assert code == 2 and "add --keep-others" in capsys.readouterr().err
    assert readme.read_text() == text and not (tmp_path / "r.json").exists()   # before measuring anything


def test_markdown_table_has_caption_and_rows() -> None:
    rows = [common.row("s", "a | b", 1.5, "x", ">= 1x", True, "n")]
    md = common.markdown_table(rows, "Measured on 2 CPUs")
    assert md.splitlines()[0] == "_Measured on 2 CPUs_"
    assert "| s | a \\| b | 1.5 | x | >= 1x | yes | n |" in md


def test_a_partial_run_replaces_only_its_own_sections(tmp_path) -> None:
    import json

    from benchmarks.__main__ import merged_with_previous
    from benchmarks.common import row

    saved = tmp_path / "results.json"
    old = [row("bucket", "a", 1.0, "x"), row("shared", "s1", 0.9, "x"), row("shared", "s2", 1.2, "x"),
           row("spark", "b", 2.0, "x")]
    old[3]["value"] = None    # as saved: NaN becomes null
    saved.write_text(json.dumps({"rows": old}))
    got = merged_with_previous(saved, [row("shared", "s1", 0.99, "x")], tmp_path / "no-README.md")
    assert [(r["section"], r["name"], r["value"]) for r in got[:3]] == [
        ("bucket", "a", 1.0), ("shared", "s1", 0.99), ("spark", "b", got[2]["value"])]
    assert len(got) == 3 and got[2]["value"] != got[2]["value"]    # null read back as NaN
    nothing = tmp_path / "none"
    assert merged_with_previous(nothing / "results.json", [row("x", "y", 1.0, "")], nothing / "README.md") == [
        row("x", "y", 1.0, "")]


def test_without_saved_results_a_partial_run_keeps_the_readme_table(tmp_path) -> None:
    from benchmarks.__main__ import merged_with_previous
    from benchmarks.common import README_END, README_START, markdown_table, row

    old = [row("bucket", "a | b", 1436.0, "ns", ">= 5x", True, "n"), row("shared", "s1", 0.9, "x", "0.97", False),
           row("spark", "c", float("nan"), "s")]
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n{README_START}\n{markdown_table(old, 'Measured on 2 CPUs')}\n{README_END}\n")
    got = merged_with_previous(tmp_path / "absent.json", [row("shared", "s1", 0.99, "x")], readme)
    assert [(r["section"], r["name"], r["ok"]) for r in got] == [
        ("bucket", "a | b", True), ("shared", "s1", None), ("spark", "c", None)]
    assert got[0]["value"] == 1436.0 and got[0]["goal"] == ">= 5x" and got[2]["value"] != got[2]["value"]


def test_a_partial_run_keeps_the_readme_table_over_an_older_saved_run(tmp_path) -> None:
    import json

    from benchmarks.__main__ import merged_with_previous
    from benchmarks.common import README_END, README_START, markdown_table, row

    # the shared-limit rows were measured alone and written into the README only, over an older full run's
    # that results.json still holds: a later partial run of another module must keep the README's
    shown = [row("bucket", "a", 1.0, "x"), row("shared", "s1", 0.95, "x"), row("quota", "q", 2.0, "x")]
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n{README_START}\n{markdown_table(shown, 'Measured on 2 CPUs')}\n{README_END}\n")
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps({"rows": [row("bucket", "a", 1.1, "x"), row("shared", "s1", 0.9, "x"),
                                          row("quota", "q", 3.0, "x"), row("spark", "b", 4.0, "x")]}))
    got = merged_with_previous(saved, [row("quota", "q", 5.0, "x")], readme)
    assert [(r["section"], r["name"], r["value"]) for r in got] == [
        ("bucket", "a", 1.0), ("shared", "s1", 0.95), ("quota", "q", 5.0), ("spark", "b", 4.0)]


def test_a_row_merge_replaces_rows_by_name_and_places_new_ones_beside_their_label() -> None:
    from benchmarks.common import row
    from benchmarks.table import merge

    old = [row("shared", "w [ours]: mean", 0.9, "x"), row("shared", "w [ours]: worst", 1.2, "x"),
           row("shared", "v [ours]: mean", 1.0, "x"), row("spark", "z", 1.0, "x")]
    got = merge(old, [row("shared", "w [ours]: worst", 1.1, "x"), row("shared", "w [ours]: throttled", 0.0, "x"),
                      row("shared", "u [ours]: mean", 0.5, "x")], by="row")
    assert [(r["name"], r["value"]) for r in got] == [
        ("w [ours]: mean", 0.9), ("w [ours]: worst", 1.1), ("w [ours]: throttled", 0.0), ("v [ours]: mean", 1.0),
        ("u [ours]: mean", 0.5), ("z", 1.0)]
    with pytest.raises(ValueError, match="by must be 'section' or 'row'"):
        merge(old, [], by="rows")


def test_the_readme_table_reads_back_as_it_was_written() -> None:
    from pathlib import Path

    from benchmarks.common import markdown_table
    from benchmarks.table import _table_lines, readme_caption, readme_rows

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    rows = readme_rows(text)
    assert len(rows) > 100
    assert markdown_table(rows, readme_caption(text)) == "\n".join(_table_lines(text)).strip()


def test_rows_written_into_a_readme_keep_the_others_and_say_when(tmp_path) -> None:
    from benchmarks.common import README_END, README_START, markdown_table, row
    from benchmarks.table import readme_caption, readme_rows, write_rows_into_readme

    readme = tmp_path / "README.md"
    old = [row("shared", "w: mean", 0.9, "x"), row("spark", "z", 1.0, "x")]
    readme.write_text(f"intro\n{README_START}\n{markdown_table(old, 'Measured then.')}\n{README_END}\nend\n")
    write_rows_into_readme(readme, [row("shared", "w: mean", 0.97, "x")], "2026-11-27 20:24 UTC", "shared (w)")
    write_rows_into_readme(readme, [row("spark", "z", 2.0, "x")], "2026-11-28 09:00 UTC", "spark")
    write_rows_into_readme(readme, [row("shared", "w: mean", 0.98, "x")], "2026-11-28 10:00 UTC", "shared (w)")
    text = readme.read_text()
    assert [(r["name"], r["value"]) for r in readme_rows(text)] == [("w: mean", 0.98), ("z", 2.0)]
    # the full run's date stays, and each re-measured part says when, the newest first
    assert readme_caption(text) == ("Measured then. Some rows re-measured: the shared (w) rows 2026-11-28 10:00 UTC; "
                                    "the spark rows 2026-11-28 09:00 UTC.")
    assert text.startswith("intro\n") and text.endswith("end\n")
    # a row the fresh ones leave without meaning (``stale``) goes; a fresh row of that name would replace it anyway
    write_rows_into_readme(readme, [row("shared", "w: max", 1.0, "x")], "2026-11-28 11:00 UTC", "shared (w)",
                           stale=lambda r: r["name"] == "w: mean")
    assert {(r["name"], r["value"]) for r in readme_rows(readme.read_text())} == {("w: max", 1.0), ("z", 2.0)}


def test_a_caption_that_listed_its_re_measured_rows_with_commas_keeps_them() -> None:
    from benchmarks.__main__ import measured_span
    from benchmarks.table import remeasured

    old = ("Measured 2026-11-26 14:06 UTC on 2 CPUs. Some rows re-measured: the shared rows 2026-11-27 17:32-18:20 "
           "UTC, the demo and replicas rows 2026-11-26 16:05-16:35 UTC.")
    assert remeasured(old, "shared", "2026-11-27 20:24-21:11 UTC") == (
        "Measured 2026-11-26 14:06 UTC on 2 CPUs. Some rows re-measured: the shared rows 2026-11-27 20:24-21:11 UTC; "
        "the demo and replicas rows 2026-11-26 16:05-16:35 UTC.")
    assert remeasured("", "quota", "now") == "Some rows re-measured: the quota rows now."
    # the whole module re-measured: its workloads re-measured before are in it, and no longer listed apart
    some = ("Measured then. Some rows re-measured: the shared (w) rows 2026-11-29 12:17 UTC; the quota rows "
            "2026-11-28 10:00 UTC.")
    assert remeasured(some, "shared", "2026-11-29 16:27 UTC") == (
        "Measured then. Some rows re-measured: the shared rows 2026-11-29 16:27 UTC; the quota rows 2026-11-28 "
        "10:00 UTC.")
    assert "the shared (w) rows 2026-11-29 12:17 UTC" in remeasured(some, "shared (v)", "2026-11-29 16:27 UTC")
    # several modules re-measured in one run: every entry of theirs goes, an entry of others keeps the others
    listed = ("Measured then. Some rows re-measured: the shared rows 2026-11-29 20:26 UTC; the adaptive rows "
              "2026-11-28 12:56 UTC; the demo and replicas rows 2026-11-28 11:04 UTC.")
    assert remeasured(listed, "adaptive and demo", "2026-11-29 22:32 UTC") == (
        "Measured then. Some rows re-measured: the adaptive and demo rows 2026-11-29 22:32 UTC; the shared rows "
        "2026-11-29 20:26 UTC; the replicas rows 2026-11-28 11:04 UTC.")
    import datetime
    end = datetime.datetime(2026, 11, 27, 21, 11, tzinfo=datetime.UTC)
    assert measured_span("2026-11-27 20:24 UTC", end) == "2026-11-27 20:24-21:11 UTC"
    assert measured_span("2026-11-26 23:50 UTC", end) == "2026-11-26 23:50 UTC - 2026-11-27 21:11 UTC"


@pytest.mark.integration
def test_scale_runs_a_small_case_through_the_real_participant_and_control_plane() -> None:
    from benchmarks import bench_scale

    m = bench_scale.measure(groups=1, limits=300, cycles=2)
    assert m["participants"] == bench_scale.PER_LIMIT and m["limits"] == 300
    assert 0 < m["report_sent"] < m["raw"] / 4                      # gzip on the wire
    assert 0 < m["report_received"] < 1024                           # no usage map in the answer
    assert m["grant_sent"] > 0 and m["cycle_bytes"] > m["report_sent"]
    assert 0 < m["share_memory"] < m["memory"] and m["cp_cpu_per_report_s"] > 0
    assert m["change_grant_s"] < 30 and m["change_report_s"] < 30
    assert_well_formed(bench_scale.rows_of(m))


@pytest.mark.integration
def test_replicas_measures_a_grant_ask_in_one_process_and_on_a_replica() -> None:
    from benchmarks.bench_replicas import ask_cpu_s
    from controlplane.launcher import RedisServer

    redis = RedisServer().start()
    try:
        cost = ask_cpu_s(redis.url)
    finally:
        redis.close()
    assert 0 < cost["process"] < cost["replica"] < 0.05


@pytest.mark.parametrize("text", ["0", "-5", "1.5", "many"])
def test_the_adaptive_benchmarks_micro_batch_size_must_be_a_whole_number_of_rows(
        text: str, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.bench_adaptive import build_parser

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--rows-per-batch", text])
    said = capsys.readouterr().err
    assert exited.value.code == 2 and "--rows-per-batch" in said and "whole number" in said, said
    assert build_parser().parse_args(["--rows-per-batch", "10000"]).rows_per_batch == 10000


def test_a_partial_run_keeps_the_full_runs_caption_and_says_when_its_rows_were_measured(tmp_path: Path) -> None:
    from benchmarks import __main__ as runner
    from benchmarks.table import readme_caption, readme_rows

    readme = tmp_path / "README.md"
    old = [common.row("bucket", "a row of before", 1.0, "x"), common.row("spark", "z", 2.0, "x")]
    readme.write_text(f"# t\n{common.README_START}\n{common.markdown_table(old, 'Measured then on 2 CPUs.')}\n"
                      f"{common.README_END}\n")
    assert runner.main(["--quick", "--only", "bucket", "--keep-others", "--write-readme", "--readme", str(readme),
                        "--json", str(tmp_path / "r.json")]) == 0
    text = readme.read_text()
    caption = readme_caption(text)
    assert caption.startswith("Measured then on 2 CPUs. Some rows re-measured: the bucket rows 20"), caption
    rows = readme_rows(text)
    assert ("spark", "z") in [(r["section"], r["name"]) for r in rows]
    assert "a row of before" not in [r["name"] for r in rows]   # (the module's section is replaced whole)


@pytest.mark.parametrize(("argv", "said"), [
    (["--only", "stream, 1 topic, 3 tasks"], "no workload is named 'stream, 1 topic, 3 tasks'; the workloads are: "
                                             "'stream, 1 topic, 2 tasks'"),
    (["--only", "stream, one executor killed", "--where", "local[2]"],
     "'stream, one executor killed' runs on cluster only, and --where says local[2]"),
    (["--only", "stream, 3 topics, resource group, 4 tasks", "--kind", "redis"],
     "'stream, 3 topics, resource group, 4 tasks' is run by ours only, and --kind says redis"),
    (["--kind", "nothing"], "invalid choice: 'nothing'"),
])
def test_the_shared_benchmark_refuses_a_selection_that_would_run_nothing(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.bench_shared import parse_args

    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and said in err, err
    ok = parse_args(["--only", "stream, one executor killed", "--where", "cluster", "--kind", "redis"])
    assert ok.only == ["stream, one executor killed"] and ok.where == ["cluster"] and ok.kind == ["redis"]
