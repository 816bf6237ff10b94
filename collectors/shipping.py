"""Ship the library to the executors the Spark way, so a cluster's nodes need no install of throttlescope.

What the executors import is pure Python: ``limiter``, ``protocol`` (the wire and policy models) and
``collectors`` (the participant and the Spark helpers). ``library_archive()`` zips those three packages, exactly as this driver
imports them, into one file named after its content (``throttlescope-lib-<sha256[:12]>.zip``): two drivers with
the same code share one archive, and an edited checkout gets a new name, so an executor never runs a stale copy.
Each module goes in compiled too (``<module>.pyc`` beside its source, an unchecked hash-based pyc of this Python):
Python cannot cache bytecode for a zip, so every new Python worker compiled the library from source -- 50 ms of
its start (0.27 s with it) before its task's first send. PySpark's workers run the driver's Python version; one
that does not finds a bad magic number and falls back to the source beside it.

``ship_library(setter, get)`` adds that archive to ``spark.files`` (the JVM copies it to every executor's working
directory when the SparkContext starts) and to ``spark.submit.pyFiles`` (PySpark then puts it first on every
Python worker's ``sys.path``) -- the two settings ``spark-submit --py-files`` itself sets, keeping any the user
set before. ``collectors.spark.configure`` calls it unless told ``ship=False`` (or THROTTLESCOPE_SHIP_LIBRARY=0):
the opt-out for clusters whose image already holds the library.

What is not shipped: the third-party packages the library imports on the executors (``httpx``, ``pydantic``,
``pyarrow``) hold compiled code a zip cannot load; a cluster has them as it has PySpark's own, or ships a packed
environment with ``spark.archives`` (venv-pack / conda-pack).
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from .config import RuntimeConfig

__all__ = ["SHIPPED_PACKAGES", "library_archive", "ship_library", "shipping_enabled"]

SHIPPED_PACKAGES = ("limiter", "protocol", "collectors")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)     # zip entries carry a time: a fixed one keeps equal code byte-equal


def shipping_enabled(ship: bool | None) -> bool:
    """``ship`` if given, else THROTTLESCOPE_SHIP_LIBRARY (default on). Raises ConfigError for a bad value (or for
    any bad participant setting in this process's environment: the driver passes them on to the executors)."""
    if ship is not None:
        return bool(ship)
    return RuntimeConfig.from_env().ship_library


def _package_files(name: str) -> list[tuple[str, Path]]:
    """``(path inside the archive, file)`` for every ``.py`` (and ``py.typed``) of package ``name``."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot ship package {name!r}: it is not importable here as a package")
    root = Path(next(iter(spec.submodule_search_locations)))
    files = [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
             and (p.suffix == ".py" or p.name == "py.typed")]
    return sorted((f"{name}/{p.relative_to(root).as_posix()}", p) for p in files)


def _pyc(arcname: str, source: bytes) -> bytes:
    """``source`` compiled, as an unchecked hash-based pyc (PEP 552: valid with no file times to compare)."""
    code = compile(source, arcname, "exec", dont_inherit=True)
    flags = (1).to_bytes(4, "little")   # hash-based, not checked against the source
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code)


def library_archive(directory: Path | None = None, packages: tuple[str, ...] = SHIPPED_PACKAGES) -> Path:
    """The archive of ``packages`` (default: the library's) in ``directory`` (default: the system's temporary
    directory), built unless one with the same content is there already."""
    sources = [(arcname, path.read_bytes()) for name in packages for arcname, path in _package_files(name)]
    entries = [*sources, *((arcname + "c", _pyc(arcname, data)) for arcname, data in sources
                          if arcname.endswith(".py"))]
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)   # (the compiled entries are this Python's)
    for arcname, data in sources:
        digest.update(arcname.encode() + b"\0" + hashlib.sha256(data).digest())
    directory = Path(directory or tempfile.gettempdir())
    target = directory / f"throttlescope-lib-{digest.hexdigest()[:12]}.zip"
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    # written aside and renamed: a driver starting beside this one never ships a half-written archive
    fd, partial = tempfile.mkstemp(prefix=".throttlescope-lib-", suffix=".zip", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for arcname, data in entries:
                archive.writestr(zipfile.ZipInfo(arcname, _FIXED_TIME), data, zipfile.ZIP_DEFLATED)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return target


def ship_library(setter: Callable[[str, str], object], get: Callable[[str], str | None],
                 directory: Path | None = None) -> Path:
    """Add the library's archive to ``spark.files`` and ``spark.submit.pyFiles`` through ``setter`` (a builder's
    ``config`` or a SparkConf's ``set``), after what ``get`` says is there already; returns the archive."""
    archive = library_archive(directory)
    for key in ("spark.files", "spark.submit.pyFiles"):
        present = [p for p in (get(key) or "").split(",") if p]
        if str(archive) not in present:
            setter(key, ",".join([*present, str(archive)]))
    return archive
