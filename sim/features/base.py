"""What the model (sim.model.Model) asks of a scenario feature: attach, then add tables."""

from __future__ import annotations


class Feature:
    """One scenario key's part in the model.

    `__init__(model, spec)` attaches it through the model's public API (its parts, events
    and hooks; sim.model.Model, sim.network.Network, sim.clock.Environment), after the
    model's groups, drivers and sources are built; `finish(tables, facts)` adds its tables
    and facts when the run is over. The class attributes tell the model, before it builds
    anything, what the feature will change while it runs, so that the model keeps its
    shortcuts only where they stay exact.
    """

    # It moves operator instances or the paths messages take while the run goes on: no
    # direct hand-over (sim.model.Model's), whose check sees only the start.
    dynamic = False
    # It changes links' latency, jitter or loss while the run goes on: no source puts its
    # messages on its first link ahead of their time (sim.sources.Source's private link).
    changes_links = False

    @classmethod
    def moves(cls, spec) -> bool:
        """Whether, with this spec, it moves instances or paths while the run goes on:
        `dynamic`, unless a feature's moves depend on its spec (energy: only an offload)."""
        return cls.dynamic

    @staticmethod
    def spares(spec) -> set[str]:
        """Brokers that no node takes as its own at the start (this feature moves some there)."""
        return set()

    def __init__(self, model, spec):
        self.model = model
        self.spec = spec

    def finish(self, tables: dict, facts: dict) -> None:
        """Add this feature's tables and facts (the model's samples are in already). A
        message's end goes to the model's log (`model.log.lost(msg, now)`): the messages and
        migrations tables are built from it after every feature has finished."""
