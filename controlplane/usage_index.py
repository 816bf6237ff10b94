"""The usage index: limit key -> participant -> its latest usage and demand, kept in step with every report.

An answer to a report carries the usage map of the shared limits that participant reported (``usage_map``), and
with 1,000 participants a second that lookup must not scan every participant: the index is updated by each
report's difference (limits it stopped using are dropped, the others replaced), so a lookup costs the users of the
keys asked for. Not thread-safe: ``controlplane.state.LiveState`` owns one and calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol import UsageValues

__all__ = ["UsageIndex"]


class UsageIndex:
    def __init__(self) -> None:
        self._by_key: dict[str, dict[str, UsageValues]] = {}

    def replace(self, pid: str, old: dict[str, UsageValues], new: dict[str, UsageValues]) -> None:
        """Participant ``pid``'s usage was ``old`` and is now ``new`` (by limit key; ``{}``: it is gone)."""
        for key in old.keys() - new.keys():
            users = self._by_key[key]
            del users[pid]
            if not users:
                del self._by_key[key]
        for key, value in new.items():
            self._by_key.setdefault(key, {})[pid] = value

    def users_of(self, keys: Iterable[str]) -> dict[str, dict[str, UsageValues]]:
        """For each key, participant -> usage (an empty map for a key nobody uses)."""
        return {k: dict(self._by_key.get(k, ())) for k in keys}

    def everything(self) -> dict[str, dict[str, UsageValues]]:
        """Every key anybody uses, sorted."""
        return {k: dict(users) for k, users in sorted(self._by_key.items())}
