"""docs/pulsar-compatibility.md cannot drift: its tables name every /admin/v2 operation of the served OpenAPI
document and no other, and every Java admin call that test_pulsar_admin_client.py replays, and no other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controlplane.app import create_app
from controlplane.auth import Tokens
from controlplane.config import Settings
from controlplane.models import TOPIC_DOMAINS

from .conftest import ADMIN, PARTICIPANT, REPO
from .pulsar_admin import java_calls

pytestmark = pytest.mark.unit
DOC = REPO / "docs" / "pulsar-compatibility.md"
REQUEST = re.compile(r"`(GET|POST|PUT|DELETE) (/admin/v2/[^`?\s]+)")
JAVA_CALL = re.compile(r"^\|\s*`(\w+\(\)\.\w+)\(")


def served(tmp_path: Path) -> set[tuple[str, str]]:
    app = create_app(Settings(data_dir=tmp_path), Tokens(admin=ADMIN, participant=PARTICIPANT))
    return {(method.upper(), path) for path, methods in app.openapi()["paths"].items() for method in methods
            if path.startswith("/admin/v2/")}


def section(title: str) -> list[str]:
    text = DOC.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return [line for line in text[start:end if end > 0 else None].splitlines() if line.startswith("| ")]


def documented(rows: list[str]) -> set[tuple[str, str]]:
    """Every request a table names, ``{domain}`` standing for each topic domain."""
    return {(method, path.replace("{domain}", domain)) for row in rows for method, path in REQUEST.findall(row)
            for domain in TOPIC_DOMAINS}


def test_every_operation_is_documented_and_every_documented_one_is_served(tmp_path: Path) -> None:
    ops = served(tmp_path)
    pulsar, ours = documented(section("Operations")), documented(section("throttlescope's own operations"))
    assert not pulsar & ours, f"in both tables: {sorted(pulsar & ours)}"
    assert sorted(ops - pulsar - ours) == [], "served but not in docs/pulsar-compatibility.md"
    assert sorted((pulsar | ours) - ops) == [], "in docs/pulsar-compatibility.md but not served"
    assert len(pulsar) >= 40 and len(ours) >= 30


def test_every_java_call_replayed_is_documented_and_no_other() -> None:
    in_doc = {m.group(1) for row in section("Operations") if (m := JAVA_CALL.match(row))}
    assert in_doc == java_calls()
    assert all(JAVA_CALL.match(row) for row in section("Operations")[2:]), "a row without a Java call"
