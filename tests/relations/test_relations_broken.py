"""Each relation of tests/relations/relations.py fails on a deliberately broken model: a check
that cannot fail is a defect. Each test breaks one part of the model (or of what summarises
it) the way a real bug would, with pytest's monkeypatch (undone after the test), runs a
short experiment and asserts that the check reports the break; the same check on the
unbroken model is what test_relations.py asserts empty. These pass whatever state the model's
known bugs are in: each break is its own.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import random

import numpy as np
import pytest

import sim.model
import workloads.features
from experiments import summary as summary_module
from sim.costs import Costs
from sim.features.energy import Energy
from sim.recorder import MessageLog
from sim.sampler import Sampler
from sim.sources import Source
from tests.relations import relations as rel
from tests.relations.runs import run
from workloads.energy_ledger import Ledger

QUICK = ["run.duration=20s"]
COUNTED = "scenario.energy={}"


def said(found: list[str], *words: str) -> None:
    """The check found the break, and its violation names it."""
    assert found, "the check found nothing wrong with a broken model"
    text = "\n".join(found)
    for word in words:
        assert word in text, f"{word!r} not in: {text}"


def replace_feature_summary(monkeypatch, key: str, summary) -> None:
    """Have the summary take a feature's figures from `summary` (workloads.features' entry,
    a frozen dataclass, replaced in the registry the summary reads)."""
    features = tuple(dataclasses.replace(f, summary=summary) if f.key == key else f
                     for f in workloads.features.FEATURES)
    monkeypatch.setattr(workloads.features, "FEATURES", features)


# -- conserved -------------------------------------------------------------------------------

def test_a_lost_reading_the_log_forgets_breaks_conservation(monkeypatch) -> None:
    """A loss recorded for one message in three (a path that drops a reading and forgets
    to log its end)."""
    lost, calls = MessageLog.lost, [0]

    def forgetful(self, msg, now):
        calls[0] += 1
        if calls[0] % 3:
            lost(self, msg, now)
    monkeypatch.setattr(MessageLog, "lost", forgetful)
    broken = run("quickstart", QUICK)
    assert calls[0] > 3
    said(rel.check_readings_conserved(broken), "without an end", "devices' readings")


def test_a_summary_that_counts_copies_breaks_conservation(monkeypatch) -> None:
    """Each reading of hybrid-mobility reaches two sinks (a person's trail and the cloud's
    stats): counting rows (copies) as readings counts each twice."""
    def by_row(ids, state):
        return {name: int((state == name).sum()) for name in rel._STATES}
    monkeypatch.setattr(summary_module, "reading_counts", by_row)
    broken = run("hybrid-mobility", QUICK)
    said(rel.check_readings_conserved(broken), "the summary's delivered")


def test_an_energy_row_booked_twice_breaks_energy_conservation(monkeypatch) -> None:
    """The ledger books one CPU interval of gw-1 into the table twice over, its total once."""
    row, booked = Ledger._row, []

    def twice(self, t0, t1, node, link, kind, utilisation, count, joules):
        if node == "gw-1" and not booked:
            booked.append(joules)
            joules *= 2
        row(self, t0, t1, node, link, kind, utilisation, count, joules)
    monkeypatch.setattr(Ledger, "_row", twice)
    broken = run("quickstart", [*QUICK, COUNTED])
    said(rel.check_energy_conserved(broken), "total_j", "gw-1")


def test_energy_left_uncounted_at_the_end_breaks_its_coverage(monkeypatch) -> None:
    """The ledger skips each node's last CPU interval (an off-by-one over the samples)."""
    cpu = Ledger.cpu

    def but_the_last(self, t0, t1, node, u):
        if t1 < self.duration - 1e-9:
            cpu(self, t0, t1, node, u)
    monkeypatch.setattr(Ledger, "cpu", but_the_last)
    broken = run("quickstart", [*QUICK, COUNTED])
    assert not rel.check_energy_conserved(broken)  # the table and facts agree, both short
    said(rel.check_energy_covers_run(broken), "gw-1 19 s")


# -- must not change ---------------------------------------------------------------------------

def test_a_feature_that_touches_a_cpu_changes_other_tables(monkeypatch) -> None:
    """The energy feature, meant to watch, slows the cloud VM's CPU by 1 %."""
    init = Energy.__init__

    def meddling(self, model, spec):
        init(self, model, spec)
        model.cpus["cloud-1"].speed *= 0.99
    monkeypatch.setattr(Energy, "__init__", meddling)
    without, with_ = run("quickstart", QUICK), run("quickstart", [*QUICK, COUNTED])
    said(rel.check_same_tables(without, with_, ["messages", "nodes", "links"]),
         "nodes:", "cpu (")


def test_a_sampler_that_costs_cpu_changes_the_messages(monkeypatch) -> None:
    """Each sample costs each gateway 50 ms of each core (a monitor on the node it measures):
    the readings queue behind it, more often at 5 s than at 7 s."""
    original = Sampler.run

    def costly(self):
        process = original(self)
        gateways = [cpu for cpu in self.cpus if cpu.name.startswith("gw-")]
        for event in process:
            yield event
            for cpu in gateways:
                for _ in range(cpu.cores):
                    cpu.admit(self.env.now, 0.05)
    monkeypatch.setattr(Sampler, "run", costly)
    five = run("quickstart", ["run.duration=60s", "run.sample=5s"])
    seven = run("quickstart", ["run.duration=60s", "run.sample=7s"])
    said(rel.check_same_tables(five, seven, ["messages"]), "messages:")


def test_a_ledger_that_takes_every_sample_for_a_second_changes_the_energy(monkeypatch) -> None:
    """The ledger books each CPU sample as 1 s long, whatever the interval."""
    cpu = Ledger.cpu
    monkeypatch.setattr(Ledger, "cpu", lambda self, t0, t1, node, u: cpu(self, t1 - 1, t1,
                                                                          node, u))
    five = run("quickstart", [*QUICK, COUNTED, "run.sample=5s"])
    four = run("quickstart", [*QUICK, COUNTED, "run.sample=4s"])
    said(rel.check_same_energy(five, four), "energy figures differ", "+25.00%")


def test_sources_drawing_from_one_shared_stream_break_seed_determinism(monkeypatch) -> None:
    """Every source draws from one stream the process shares (seeded once, not per run), so
    a run's draws depend on what ran before it."""
    shared = random.Random(1)
    init = Source.__init__
    signature = inspect.signature(init)

    def sharing(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["rng"] = shared
        init(*bound.args, **bound.kwargs)
    monkeypatch.setattr(Source, "__init__", sharing)
    first, again = run("quickstart", QUICK), run("quickstart", QUICK)
    said(rel.check_same_tables(first, again), "messages:", "nodes:")


def test_facts_that_differ_break_seed_determinism(monkeypatch) -> None:
    """A run's facts carry the wall clock."""
    run_model = sim.model.Model.run
    clock = iter(range(1000))

    def stamped(self, progress=None):
        result = run_model(self, progress)
        result.facts["started"] = next(clock)
        return result
    monkeypatch.setattr(sim.model.Model, "run", stamped)
    first, again = run("quickstart", QUICK), run("quickstart", QUICK)
    said(rel.check_same_facts(first, again), "facts.started")


def test_a_summary_that_takes_the_clock_breaks_seed_determinism(monkeypatch) -> None:
    """The summary's latency figures carry a counter the process shares."""
    percentiles, clock = summary_module._percentiles, iter(range(1000))

    def stamped(latency):
        return {**percentiles(latency), "computed": next(clock)}
    monkeypatch.setattr(summary_module, "_percentiles", stamped)
    first, again = run("quickstart", QUICK), run("quickstart", QUICK)
    said(rel.check_same_summary(first, again), "summary.latency_s.computed")


# -- must move, and which way ------------------------------------------------------------------

def test_a_cost_the_model_does_not_charge_breaks_cost_to_cpu(monkeypatch) -> None:
    """Every operator costs 100 us, whatever is written (as a Spark operator's written cost
    once did)."""
    operator = Costs.operator
    monkeypatch.setattr(Costs, "operator", lambda self, spec, node: dataclasses.replace(
        operator(self, spec, node), message=100e-6))
    low, high = (run("lesson-placement", [*QUICK, f"pipeline.0.cost={c}"])
                 for c in ("100us", "3ms"))
    said(rel.check_grows(low, high, rel.node_cpu("gw-1"), "cpu"), "not more than")


def test_a_source_that_ignores_its_rate_breaks_rate_to_readings(monkeypatch) -> None:
    """Every source emits once a second, whatever its rate."""
    init = Source.__init__

    def once_a_second(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._peak = 1.0
    monkeypatch.setattr(Source, "__init__", once_a_second)
    low, high = (run("migrate-pause-drain", ["run.duration=20s", "scenario.migrations=[]",
                                             f"workload.streams.0.rate={r}"])
                 for r in ("2/s", "10/s"))
    said(rel.check_grows(low, high, rel.emitted, "emitted"), "not more than")


def test_a_sampler_that_stops_early_breaks_duration_to_energy(monkeypatch) -> None:
    """The sampler stops at 10 s, whatever the run's duration: the nodes' energy after it is
    never counted."""
    init = Sampler.__init__

    def stopping(self, env, topology, cpus, channels, interval, until, mean_size):
        init(self, env, topology, cpus, channels, interval, min(until, 10.0), mean_size)
    monkeypatch.setattr(Sampler, "__init__", stopping)
    low, high = (run("quickstart", [f"run.duration={d}s", COUNTED]) for d in (15, 30))
    said(rel.check_grows(low, high, rel.energy, "energy"), "gw-1 is")


# -- bounded -----------------------------------------------------------------------------------

def _lost_per_fault(tables, facts):
    """The faults' figure as it was before issue 38 item 2: each fault counts the readings
    lost while it is in force, so one lost under overlapping faults counts once per fault."""
    rows = tables["faults"].to_pylist()
    if not rows:
        return {}
    messages = tables["messages"]
    lost = messages.column("lost").to_numpy(zero_copy_only=False).astype(bool)
    sent = messages.column("t_sent").to_numpy(zero_copy_only=False)
    return {"faults": len(rows), "lost while in force": sum(int((lost & (sent >= r["t_start"]) & (
        sent <= (r["t_end"] if r["t_end"] is not None else math.inf))).sum()) for r in rows)}


def test_lost_counted_once_per_overlapping_fault_breaks_the_bound(monkeypatch) -> None:
    replace_feature_summary(monkeypatch, "faults", _lost_per_fault)
    batteries = 'scenario.energy={batteries: [{devices: "sensor-[1-9]", joules: 0.5}]}'
    broken = run("quickstart", ["run.duration=30s", batteries])
    said(rel.check_bounds(broken), "lost while in force")


def test_a_cpu_sample_doubled_breaks_the_share_bound(monkeypatch) -> None:
    """gw-1's CPU share is recorded twice over (the gateways are saturated: about 1)."""
    init = Sampler.__init__

    def doubling(self, *args, **kwargs):
        init(self, *args, **kwargs)
        add = self.nodes_log.add

        def row(t, name, cpu, *rest):
            add(t, name, cpu * 2 if name == "gw-1" else cpu, *rest)
        self.nodes_log.add = row
    monkeypatch.setattr(Sampler, "__init__", doubling)
    broken = run("quickstart", [*QUICK, "pipeline.0.cost=150ms"])
    said(rel.check_bounds(broken), "nodes table have a cpu outside [0, 1]")


def test_a_node_with_more_energy_than_the_run_breaks_the_part_bound(monkeypatch) -> None:
    facts = Ledger.facts

    def inflated(self, *args, **kwargs):
        found = facts(self, *args, **kwargs)
        found["by_node"]["gw-1"] = found["total_j"] * 2
        return found
    monkeypatch.setattr(Ledger, "facts", inflated)
    broken = run("quickstart", [*QUICK, COUNTED])
    said(rel.check_bounds(broken), "energy parts", "gw-1")


def test_phantom_deliveries_break_the_stream_bound(monkeypatch) -> None:
    """A sink records each delivery a second time under an id no source emitted."""
    delivered = MessageLog.delivered

    def twice(self, msg, sink, now):
        delivered(self, msg, sink, now)
        if sink >= 0:
            self.id.append(10**9 + msg.id)
            for name in ("stream", "source", "sink", "t_sent", "t_received", "hops"):
                column = getattr(self, name)
                column.append(column[-1])
    monkeypatch.setattr(MessageLog, "delivered", twice)
    broken = run("quickstart", QUICK)
    said(rel.check_bounds(broken), "stream city", "readings delivered")


def test_a_downtime_longer_than_its_migration_breaks_the_bound(monkeypatch) -> None:
    columns = sim.model.migration_columns

    def longer(records):
        found = columns(records)
        found["downtime"] = found["end"] - found["start"] + 1.0
        return found
    monkeypatch.setattr(sim.model, "migration_columns", longer)
    broken = run("migrate-pause-transfer", ["run.duration=30s"])
    said(rel.check_bounds(broken), "downtime is longer than the migration")


def test_a_recovery_noticed_after_it_recovered_breaks_the_bound(monkeypatch) -> None:
    """The recovery feature books the time to notice a crash and the time to recover it in
    each other's column."""
    from sim.features.recovery import Recovery

    finish = Recovery.finish

    def swapped(self, tables, facts):
        finish(self, tables, facts)
        rows = tables["recoveries"]
        rows["detect"], rows["recover"] = rows["recover"], rows["detect"]
    monkeypatch.setattr(Recovery, "finish", swapped)
    broken = run("recovery")
    said(rel.check_bounds(broken), "recoveries noticed after they recovered")


# -- must be said ------------------------------------------------------------------------------

def test_a_summary_silent_on_an_unfinished_migration_breaks_the_saying(monkeypatch) -> None:
    """The summary's migration figures, rows and warnings drop whatever says a migration
    had not ended."""
    from workloads import figures

    def silent(tables, facts):
        return {k: v for k, v in figures.migrations(tables, facts).items()
                if not rel.UNFINISHED.search(str(k))}
    replace_feature_summary(monkeypatch, "migrations", silent)
    rows = summary_module._migrations
    monkeypatch.setattr(summary_module, "_migrations", lambda table: [
        {k: v for k, v in row.items() if k != "status"} for row in rows(table)])
    monkeypatch.setattr(summary_module, "migration_warnings", lambda *args, **kwargs: [],
                        raising=False)
    broken = run("thesis-ch6-rate", ["run.duration=45s", "workload.streams.0.rate=100/s",
                                     "run.drain=30s"])
    said(rel.check_unfinished_said(broken), "had no end", "does not say so")


def test_a_model_that_names_no_saturated_node_breaks_the_saying(monkeypatch) -> None:
    monkeypatch.setattr(sim.model, "saturation", lambda nodes: {})
    broken = run("quickstart", [*QUICK, "pipeline.0.cost=150ms"])
    said(rel.check_saturation_said(broken), "does not name", "gw-1")


def test_a_saturated_node_with_a_wrong_queue_breaks_the_saying(monkeypatch) -> None:
    saturation = sim.model.saturation

    def off_by_one(nodes):
        return {name: {**row, "queue_end": row["queue_end"] + 1}
                for name, row in saturation(nodes).items()}
    monkeypatch.setattr(sim.model, "saturation", off_by_one)
    broken = run("quickstart", [*QUICK, "pipeline.0.cost=150ms"])
    said(rel.check_saturation_said(broken), "does not end so")


# -- nothing after the end ---------------------------------------------------------------------

def test_a_migration_shifted_past_the_end_breaks_the_end(monkeypatch) -> None:
    columns = sim.model.migration_columns

    def late(records):
        """Every migration 100 s later, after the run's end (its drain included)."""
        found = columns(records)
        for name in ("start", "end"):
            found[name] = np.asarray(found[name], dtype=float) + 100.0
        return found
    monkeypatch.setattr(sim.model, "migration_columns", late)
    broken = run("migrate-pause-transfer", ["run.duration=30s"])
    said(rel.check_nothing_after_end(broken), "migrations rows begin at or after")


def test_a_fault_past_the_end_breaks_the_end(monkeypatch) -> None:
    """A battery's death recorded in the drain (the timer not stopped at the run's end)."""
    die = Energy._die

    def late(self, battery, t):
        die(self, battery, t + self.duration)
    monkeypatch.setattr(Energy, "_die", late)
    batteries = 'scenario.energy={batteries: [{devices: "sensor-1", joules: 0.5}]}'
    broken = run("quickstart", [*QUICK, batteries])
    said(rel.check_nothing_after_end(broken), "faults rows begin at or after", "battery")


@pytest.mark.parametrize("relation", sorted(rel.ONE_RUN))
def test_every_one_run_relation_has_a_broken_model_here(relation: str) -> None:
    """A relation added to ONE_RUN needs a test here that breaks it."""
    source = inspect.getsource(inspect.getmodule(said))
    assert f"rel.{rel.ONE_RUN[relation].__name__}(" in source
