"""Shipping the library to the executors (collectors.shipping, through configure): what the archive holds, that
it imports on its own, and the Spark settings configure writes."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pyspark import SparkConf
from pyspark.sql import SparkSession

from collectors.shipping import SHIPPED_PACKAGES, library_archive, shipping_enabled
from collectors.spark import configure

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("THROTTLESCOPE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("TMPDIR", str(tmp_path))    # the archive goes to the system's temporary directory
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)


def test_the_archive_holds_the_three_packages_each_module_beside_its_compiled_code(tmp_path: Path) -> None:
    archive = library_archive(tmp_path)
    names = zipfile.ZipFile(archive).namelist()
    assert {n.split("/", 1)[0] for n in names} == set(SHIPPED_PACKAGES)
    for must in ("limiter/__init__.py", "limiter/bucket.py", "protocol/wire.py", "collectors/runtime.py",
                 "collectors/spark.py", "collectors/jobs/publish.py"):
        assert must in names and must + "c" in names
    assert {n[:-1] for n in names if n.endswith(".pyc")} == {n for n in names if n.endswith(".py")}
    assert not [n for n in names if "__pycache__" in n]   # (none of this checkout's own caches)
    assert not [n for n in names if n.startswith(("controlplane/", "dashboard/"))]


def test_equal_code_gives_the_same_archive_and_it_is_not_rebuilt(tmp_path: Path) -> None:
    first = library_archive(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert library_archive(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert library_archive(tmp_path / "other").read_bytes() == first.read_bytes()
    assert first.name.startswith("throttlescope-lib-") and not list(tmp_path.glob(".throttlescope-lib-*"))


def test_the_archive_alone_is_what_a_fresh_interpreter_imports(tmp_path: Path) -> None:
    """Run from an empty directory with the editable install's finder removed: the packages come from the zip."""
    archive = library_archive(tmp_path)
    probe = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in "
             "getattr(f, '__module__', '')]; sys.path.insert(1, sys.argv[1]); "
             "import collectors.spark, collectors.runtime, limiter, protocol.wire; "
             "print(collectors.spark.__file__); print(limiter.__file__)")
    out = subprocess.run([sys.executable, "-c", probe, str(archive)], cwd=tmp_path, capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert all(line.startswith(str(archive) + os.sep) for line in out), out
    assert all(line.endswith(".pyc") for line in out), out   # compiled once, on the driver: not in each worker


def test_a_worker_of_another_python_imports_the_sources_beside_the_compiled_code(tmp_path: Path) -> None:
    """Compiled code of another Python version (its magic number differs) is passed over for the source."""
    archive = library_archive(tmp_path)
    other = tmp_path / "other-python.zip"
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(other, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"\0\0\r\n" + data[4:] if info.filename.endswith(".pyc") else data)
    probe = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in "
             "getattr(f, '__module__', '')]; sys.path.insert(1, sys.argv[1]); "
             "import collectors.spark, limiter; print(collectors.spark.__file__); print(limiter.__file__)")
    out = subprocess.run([sys.executable, "-c", probe, str(other)], cwd=tmp_path, capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert out == [f"{other}{os.sep}collectors{os.sep}spark.py", f"{other}{os.sep}limiter{os.sep}__init__.py"], out


def test_configure_ships_the_archive_after_what_the_user_set(tmp_path: Path) -> None:
    builder = (SparkSession.Builder().config("spark.files", "/data/lookup.csv")
               .config("spark.submit.pyFiles", "/opt/udfs.zip"))
    configure(builder)
    files = builder._options["spark.files"].split(",")
    py_files = builder._options["spark.submit.pyFiles"].split(",")
    assert files[0] == "/data/lookup.csv" and py_files[0] == "/opt/udfs.zip"
    assert files[1] == py_files[1] and Path(files[1]).name.startswith("throttlescope-lib-")
    assert Path(files[1]).is_file()
    configure(builder)     # configured twice: shipped once
    assert builder._options["spark.submit.pyFiles"].count("throttlescope-lib-") == 1


def test_a_spark_conf_gets_it_too_and_ship_false_or_the_environment_opt_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    conf = configure(SparkConf(loadDefaults=False))
    assert "throttlescope-lib-" in conf.get("spark.submit.pyFiles")
    assert "spark.submit.pyFiles" not in configure(SparkSession.Builder(), ship=False)._options
    monkeypatch.setenv("THROTTLESCOPE_SHIP_LIBRARY", "off")
    assert "spark.files" not in configure(SparkSession.Builder())._options
    assert "throttlescope-lib-" in configure(SparkSession.Builder(), ship=True)._options["spark.files"]


def test_an_unknown_opt_out_value_says_what_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THROTTLESCOPE_SHIP_LIBRARY", "maybe")
    with pytest.raises(ValueError, match=r"THROTTLESCOPE_SHIP_LIBRARY must be one of 1/true/yes/on or 0/false/no/off, "
                                         r"got 'maybe'"):
        configure(SparkSession.Builder())
    assert shipping_enabled(False) is False
