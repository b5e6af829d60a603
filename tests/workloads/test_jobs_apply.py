"""The plan between two sets of jobs (workloads.apply), its modelled times (sim.apply_times)
and `foglab apply`: exactly the changed jobs, classed by what a restart may keep."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from experiments.apply_cli import apply as apply_command
from sim.apply_times import (
    DELETE_JOB,
    DEPLOY_JOB,
    START_INSTANCE,
    STOP_INSTANCE,
    plan_time,
)
from topologies.documents import load_text
from workloads.apply import IN_PLACE, MOVE, REPLACE, Operator, apply, classify, diff

EXPERIMENTS = Path(__file__).parents[2] / "experiments"
NODES = ("gw-1", "gw-2", "gw-3", "cloud-1")


def op(name="op", nodes=("gw-1",), window=None, **fields) -> Operator:
    values = {"engine": "python", "task": "passthrough", "reads": ["city"], "writes": None,
              "params": {}, "cost": None, "window.size": window, "window.jitter":
              0.005 if window else None, **fields}
    return Operator(name, tuple(nodes), tuple(sorted(
        (k, json.dumps(v, sort_keys=True)) for k, v in values.items())))


# -- the classes, one rule each ------------------------------------------------------------

def test_a_live_setting_is_changed_in_place() -> None:
    assert classify(op(params={"a": 1}), op(params={"a": 2})).kind == IN_PLACE
    assert classify(op(writes="x"), op(writes="y")).kind == IN_PLACE  # a sink topic: allowed
    assert classify(op(window=10), op(window=10, cost=0.001)).kind == IN_PLACE


def test_a_stateless_operator_is_replaced_when_its_code_inputs_or_nodes_change() -> None:
    assert classify(op(task="passthrough"), op(task="range_filter")).kind == REPLACE
    assert classify(op(reads=["city"]), op(reads=["city", "b"])).kind == REPLACE
    change = classify(op(nodes=("gw-1",)), op(nodes=("gw-2",)))
    assert (change.kind, change.changed) == (REPLACE, ("on",))


def test_a_stateful_operator_moves_with_its_windows_unless_its_state_schema_changes() -> None:
    assert classify(op(window=10), op(window=10, nodes=("gw-2",))).kind == MOVE
    assert classify(op(window=10), op(window=10, nodes=("gw-2",), params={"b": 1})).kind == MOVE
    assert classify(op(window=10), op(window=20, nodes=("gw-2",))).kind == REPLACE
    assert classify(op(window=10), op(window=10, engine="spark", task="stats")).kind == REPLACE
    assert classify(op(window=10), op(nodes=("gw-2",))).kind == REPLACE  # state dropped


def test_a_job_takes_its_strongest_operators_class_and_counts_are_terraforms() -> None:
    old = {"a": (op("a-x"), op("a-y", window=5)), "b": (op("b"),), "c": (op("c"),)}
    new = {"a": (op("a-x", params={"k": 1}), op("a-y", window=5, nodes=("gw-3",))),
           "b": (op("b"), op("b-extra")), "d": (op("d"),)}
    plan = diff(old, new)
    assert [(c.job, c.action, c.kind) for c in plan.changes] == [
        ("a", "modify", MOVE), ("b", "modify", REPLACE), ("c", "delete", None),
        ("d", "deploy", None)]
    assert plan.summary() == "Plan: 1 to deploy, 2 to modify, 1 to delete."
    assert apply(old, plan) == new
    assert diff(new, new).empty


# -- the property: the diff is exactly the changed jobs, and applying it gives the new set --

fields = st.fixed_dictionaries({
    "nodes": st.lists(st.sampled_from(NODES), min_size=1, max_size=3, unique=True),
    "window": st.sampled_from([None, 10, 30]),
    "task": st.sampled_from(["passthrough", "range_filter"]),
    "params": st.sampled_from([{}, {"k": 1}, {"k": 2}]),
    "writes": st.sampled_from([None, "x"]),
})


@st.composite
def job_sets(draw):
    names = draw(st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8))
    return {job: tuple(op(f"{job}-{i}", **draw(fields))
                       for i in range(draw(st.integers(1, 3)))) for job in names}


@settings(max_examples=200, deadline=None)
@given(job_sets(), job_sets())
def test_the_diff_is_exactly_the_changed_jobs_and_applying_it_gives_the_new_set(old, new):
    plan = diff(old, new)
    changed = {job for job in set(old) | set(new) if old.get(job) != new.get(job)}
    assert [c.job for c in plan.changes] == sorted(changed)
    assert apply(old, plan) == new
    assert plan.count("deploy") == len(set(new) - set(old))
    assert plan.count("delete") == len(set(old) - set(new))
    for change in plan.changes:
        if change.action == "modify":
            assert change.kind in (IN_PLACE, MOVE, REPLACE) and change.operators
            if change.kind == MOVE:  # only a windowed operator keeps its state elsewhere
                assert any(o.kind == MOVE and o.before.stateful for o in change.operators)
    assert diff(old, new) == plan  # deterministic


# -- the model's times ---------------------------------------------------------------------

def test_modelled_times_are_linear_in_jobs_at_the_emulations_measured_cost_per_job() -> None:
    jobs = {f"j{i:03}": (op(f"j{i:03}", window=10),) for i in range(100)}
    deploy = plan_time(diff({}, jobs)).total
    modify = plan_time(diff(jobs, {j: (op(j, window=10, params={"k": 1}),)
                                   for j in jobs})).total
    delete = plan_time(diff(jobs, {})).total
    one = plan_time(diff({}, {"j000": jobs["j000"]})).total
    assert abs(deploy - 100 * one) < 1e-9 and one == DEPLOY_JOB + START_INSTANCE
    assert delete == pytest.approx(100 * (DELETE_JOB + STOP_INSTANCE))
    # A job of one instance costs what the emulation's apply measured per job (seconds).
    assert (deploy / 100, modify / 100, delete / 100) == pytest.approx((0.0215, 0.0100, 0.0204),
                                                                       abs=1e-9)
    assert modify < delete < deploy
    move = plan_time(diff(jobs, {**jobs, "j000": (op("j000", window=10, nodes=("gw-2",)),)}))
    replace = plan_time(diff(jobs, {**jobs, "j000": (op("j000", window=20),)}))
    assert move.total > replace.total  # the windows' transfer on top of a stop and a start


# -- foglab apply ----------------------------------------------------------------------------

def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("apply")(apply_command)
    app.callback()(lambda: None)
    return app


def _changed(tmp_path: Path) -> Path:
    """speck-jobs with the south filter's range widened, the cloud count moved onto the edge
    of the north, the west site's jobs gone (and the merge no longer reading them) and a new
    job."""
    shutil.copytree(EXPERIMENTS / "speck-jobs", tmp_path / "speck-jobs")
    data = load_text((EXPERIMENTS / "speck-jobs.yaml").read_text())  # `on` a key, not true
    data["jobs"][2]["with"]["high"] = 48
    del data["jobs"][3]
    data["jobs"][3]["reads"].remove("clean-west")
    data["jobs"][-1]["operators"][1]["on"] = "site:north"
    data["jobs"].append({"name": "alert", "on": "cloud-1", "reads": "merged"})
    path = tmp_path / "speck-jobs-2.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_foglab_apply_exits_0_unchanged_4_changed_3_on_a_bad_file(tmp_path) -> None:
    runner, app = CliRunner(), _cli()
    same = runner.invoke(app, ["apply", "speck-jobs", "--against", "speck-jobs"])
    assert same.exit_code == 0, same.output
    assert "Plan: 0 to deploy, 0 to modify, 0 to delete." in same.output
    changed = runner.invoke(app, ["apply", str(_changed(tmp_path)), "--against",
                                  "speck-jobs", "--dry-run"], env={"COLUMNS": "200"})
    assert changed.exit_code == 4, changed.output
    assert "Plan: 1 to deploy, 3 to modify, 2 to delete." in changed.output
    rows = {line.split()[0]: line.split()[1:3] for line in changed.output.splitlines()
            if line.strip() and line.split()[0] in (
                "alert", "clean-south", "global", "merge", "clean-west", "local-west")}
    assert rows == {"alert": ["deploy", "1"], "clean-south": ["modify", "in-place"],
                    "global": ["modify", "move"], "merge": ["modify", "replace"],
                    "clean-west": ["delete", "1"],
                    "local-west": ["delete", "1"]}
    assert "dry run: nothing executed" in changed.output
    bad = tmp_path / "bad.yaml"
    bad.write_text((EXPERIMENTS / "speck-jobs.yaml").read_text().replace(
        "site:cloud", "site:harbour"))
    refused = runner.invoke(app, ["apply", str(bad), "--against", "speck-jobs"])
    assert refused.exit_code == 3 and "site:harbour" in refused.output, refused.output
