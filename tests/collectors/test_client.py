"""collectors.client.ControlPlaneClient against a loopback socket that never answers: a grant ask's own timeout."""

from __future__ import annotations

import socket
import time

import pytest

from collectors.client import ControlPlaneClient, Unreachable
from protocol import GrantRequest

pytestmark = pytest.mark.unit


def test_a_grant_ask_gives_up_after_its_own_timeout_not_the_clients() -> None:
    with socket.socket() as silent:   # listens (the kernel completes the connection) and never reads nor answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        client = ControlPlaneClient(f"http://127.0.0.1:{silent.getsockname()[1]}", "token", timeout_s=5.0)
        try:
            start = time.monotonic()
            with pytest.raises(Unreachable, match="Timeout"):
                client.grant(GrantRequest(participant_id="p", asks=[]), timeout_s=0.3)
            assert 0.25 <= time.monotonic() - start < 2.0
        finally:
            client.close()
