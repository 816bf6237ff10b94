"""``python -m collectors``: help, defaults and clear errors for bad options (no Spark needed: every error
here is found before a SparkSession starts). The jobs themselves run through the CLI in test_standalone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collectors.__main__ import build_parser, main
from tests.controlplane.conftest import REPO

pytestmark = pytest.mark.unit


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_help_lists_the_jobs_and_their_options() -> None:
    proc = subprocess.run([sys.executable, "-m", "collectors", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    for job in ("publish", "dispatch", "offload", "mutation"):
        assert job in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "collectors", "dispatch", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--master" in proc.stdout and "--count-entries" in proc.stdout


def test_defaults() -> None:
    args = build_parser().parse_args(["publish"])
    assert args.master == "local[2]" and args.source == "rate" and args.sink == "files"
    args = build_parser().parse_args(["mutation", "--url", "http://127.0.0.1:1"])
    assert args.url == "http://127.0.0.1:1" and args.tables == 4 and args.per_request == 1


@pytest.mark.parametrize(("argv", "message"), [
    (["publish", "--batch-rows", "0"], "--batch-rows: must be a whole number > 0"),
    (["publish", "--duration-s", "soon"], "--duration-s: not a number"),
    (["publish", "--source", "kafka"], "invalid choice: 'kafka'"),
    (["publish", "--source", "files"], "needs an input dataset"),
    (["publish", "--sink", "ftp://x"], "sink must be 'files' or an http(s):// URL"),
    (["publish", "--topics", "acme/web"], "tenant/namespace/topic"),
    (["publish", "--conf", "spark.ui.enabled"], "expected KEY=VALUE"),
    (["publish", "--topic-weights", "3,x"], "--topic-weights: not a whole number: 'x'"),
    (["publish", "--topic-weights", "1,2"], "topic_weights must give one whole number > 0 per topic (6), got 2"),
    (["dispatch"], "--backlog"),
    (["dispatch", "--backlog", "b", "--precise", "--count-entries"], "mutually exclusive"),
    (["offload", "--hot", "h"], "--cold"),
    (["mutation", "--hours", "25"], "hours must be 1..24"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_options_exit_2_with_a_clear_message(argv, message, capsys) -> None:
    assert message in error_of(argv, capsys)


def test_files_source_needs_an_existing_input(tmp_path: Path, capsys) -> None:
    err = error_of(["publish", "--source", "files", "--input", str(tmp_path / "missing")], capsys)
    assert "does not exist" in err


def test_bad_participant_settings_are_refused_before_spark_starts(monkeypatch, capsys):
    monkeypatch.setenv("THROTTLESCOPE_REPORT_INTERVAL_S", "abc")
    with pytest.raises(SystemExit) as exit_info:
        main(["publish", "--duration-s", "1"])
    assert exit_info.value.code == 2
    assert "THROTTLESCOPE_REPORT_INTERVAL_S must be a number of seconds" in capsys.readouterr().err
