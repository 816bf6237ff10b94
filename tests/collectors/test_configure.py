"""collectors.spark.configure on a real SparkSession.Builder and SparkConf (no session started)."""

from __future__ import annotations

import os
import re
import sys

import pytest
from pyspark import SparkConf
from pyspark.sql import SparkSession

from collectors.spark import configure

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("THROTTLESCOPE_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("THROTTLESCOPE_APP_ID", raising=False)   # restored (absent) afterwards
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)


def executor_env(builder: SparkSession.Builder) -> dict[str, str]:
    prefix = "spark.executorEnv."
    return {k.removeprefix(prefix): v for k, v in builder._options.items() if k.startswith(prefix)}


def test_the_url_token_and_an_application_id_reach_the_executors() -> None:
    builder = configure(SparkSession.Builder().appName("enrich events!"), url="http://cp:8000", token="t0ken")
    env = executor_env(builder)
    assert env["THROTTLESCOPE_URL"] == "http://cp:8000" and env["THROTTLESCOPE_TOKEN"] == "t0ken"
    assert re.fullmatch(r"enrich-events-[0-9a-f]{8}", env["THROTTLESCOPE_APP_ID"])
    assert os.environ["THROTTLESCOPE_APP_ID"] == env["THROTTLESCOPE_APP_ID"]   # the driver reports the same one
    assert builder._options["spark.pyspark.python"] == sys.executable


def test_an_application_id_given_or_in_the_environment_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    assert executor_env(configure(SparkSession.Builder(), THROTTLESCOPE_APP_ID="mine"))["THROTTLESCOPE_APP_ID"] \
        == "mine"
    monkeypatch.setenv("THROTTLESCOPE_APP_ID", "from-env")
    assert executor_env(configure(SparkSession.Builder().appName("x")))["THROTTLESCOPE_APP_ID"] == "from-env"


def test_each_configured_session_gets_its_own_id_and_a_nameless_one_is_spark() -> None:
    first = executor_env(configure(SparkSession.Builder()))["THROTTLESCOPE_APP_ID"]
    assert re.fullmatch(r"spark-[0-9a-f]{8}", first)
    os.environ.pop("THROTTLESCOPE_APP_ID")
    assert executor_env(configure(SparkSession.Builder()))["THROTTLESCOPE_APP_ID"] != first


def test_a_spark_conf_works_too() -> None:
    conf = configure(SparkConf(loadDefaults=False).setAppName("nightly"), url="http://cp:8000")
    assert conf.get("spark.executorEnv.THROTTLESCOPE_URL") == "http://cp:8000"
    assert re.fullmatch(r"nightly-[0-9a-f]{8}", conf.get("spark.executorEnv.THROTTLESCOPE_APP_ID"))


def test_python_workers_hand_each_batch_on_at_once_unless_the_user_said_otherwise() -> None:
    from collectors.spark import PIPELINED

    assert configure(SparkSession.Builder())._options[PIPELINED] == "true"
    assert configure(SparkSession.Builder().config(PIPELINED, "false"))._options[PIPELINED] == "false"
    assert configure(SparkConf(loadDefaults=False)).get(PIPELINED) == "true"
