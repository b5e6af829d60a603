"""The node session's subscriptions: its filters, their identifiers, and which copy is taken.

MQTT 5 brokers send a client one copy of a message per subscription that matches it (x/+ and
x/#); each subscription gets an identifier and one copy is taken: that of the lowest
identifier that matches the topic (per topic, cached until the subscriptions change). A
filter's identifier is the same on every session of the node (a spare broker's, another
broker's: emu.agent.brokers), so a copy is told from another there too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from emu.agent.mqtt import subscribe_identified
from emu.agent.protocol import matches


class Subscriptions:
    """What the node's own session is subscribed to (`filters`), on the scheduler thread."""

    def __init__(self) -> None:
        self.filters: set[str] = set()
        self._ids: dict[str, int] = {}
        self._taken: dict[str, int] = {}  # topic -> the identifier whose copy is taken

    def id(self, topic_filter: str) -> int:
        """A filter's subscription identifier, the same on every session of the node."""
        return self._ids.setdefault(topic_filter, len(self._ids) + 1)

    def forget(self) -> None:
        """The session subscribes anew (a broker that lost its state forgot them)."""
        self.filters.clear()

    def follow(self, client: Any, wanted: set[str], others: Iterable[Any] = ()) -> set[int]:
        """Make the node session's (`client`'s) subscriptions `wanted`, and those of its
        sessions on other brokers (`others`: emu.agent.brokers.OtherBroker.follow); the new
        subscriptions' message ids (one SUBSCRIBE each: an id names a whole packet). The
        copies taken are chosen again."""
        new, gone = wanted - self.filters, self.filters - wanted
        mids = set()
        for topic_filter in sorted(new):
            mids.add(subscribe_identified(client, topic_filter, self.id(topic_filter)))
        if gone:
            client.unsubscribe(sorted(gone))
        for other in others:
            other.follow(new, gone)
        self.filters = wanted
        self._taken.clear()
        return mids

    def another_copy(self, topic: str, copy_of: list[int]) -> bool:
        """Whether this message is the copy of a subscription other than the one taken."""
        taken = self._taken.get(topic)
        if taken is None:
            taken = self._taken[topic] = min(
                (self._ids[f] for f in self.filters if matches(f, topic)), default=0)
        return taken != 0 and taken not in copy_of
