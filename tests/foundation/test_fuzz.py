"""Fuzzed experiment descriptions: whatever the input, loading fails only with a SpecError."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments import catalog
from experiments.loader import parse_text
from topologies.documents import load_text
from topologies.errors import SpecError

FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ_QUICKSTART = settings(FUZZ, max_examples=100)  # each example validates 200 sensors


def _catalog_data(kind: str, name: str) -> dict:
    return load_text(catalog.find(kind, name).read_text(encoding="utf-8"))


def _inlined_quickstart() -> dict:
    data = _catalog_data("experiment", "quickstart")
    data["topology"] = _catalog_data("topology", "smart-city")
    data["workload"] = _catalog_data("workload", "city-sensors")
    return data


QUICKSTART = _inlined_quickstart()

FIELDS = ["name", "description", "topology", "workload", "pipeline", "scenario", "run", "sweep",
          "plots", "profiles", "sites", "nodes", "links", "kind", "replicas", "profile", "site",
          "position", "spacing", "broker", "model", "from", "to", "latency", "jitter",
          "bandwidth", "loss", "mode", "streams", "sources", "rate", "arrivals", "shape",
          "size", "format", "qos", "retry", "channel", "start", "task", "engine", "on", "reads",
          "writes", "cost", "selectivity", "params", "backend", "duration", "seed",
          "repetitions", "sample", "drain", "driver_cost", "peaks", "day", "high", "low"]
WORDS = ["smart-city", "metro-10k", "city-sensors", "quickstart", "gateways", "cloud", "devices",
         "sensor-*", "gw-*", "gw-1", "cloud-1", "broker-1", "city", "clean", "city/#", "+/x",
         "#/x", "$share/g/city/#", "kafka-like", "rabbitmq-like", "spread", "all", "bursty",
         "diurnal", "bimodal", "sawtooth", "constant", "periodic", "poisson", "exclusive",
         "shared", "sim", "emu", "rpi4", "vm.small", "latency", "device", "gateway", "switch",
         "run.seed", "topology.links.0.latency", "pipeline.0.cost", "nodes.0.replicas", "",
         "20ms", "10 parsecs", "1.5s", "0s", "-1s", "100Mbit", "10MB/s", "0bit", "200B", "4KiB",
         "0.5%", "150%", "5/s", "300/min", "0/s", "1.5GHz", "1e3", "NaN", "inf", "1e400ms"]

_LEAVES = (st.none() | st.booleans()
           | st.integers(-10, 3000) | st.sampled_from([0, 1, 2**63, -(2**63), 10**30])
           | st.floats(allow_infinity=True, allow_nan=True)
           | st.text(max_size=24) | st.sampled_from(WORDS))
_KEYS = st.sampled_from(FIELDS) | st.text(max_size=10) | st.integers(-3, 3) | st.none()
VALUES = st.recursive(
    _LEAVES,
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(_KEYS, children, max_size=5)),
    max_leaves=20)


def only_spec_errors(text: str) -> None:
    """Loading either succeeds or raises the project's SpecError; nothing else escapes."""
    try:
        parse_text(text, file="fuzz.yaml")
    except SpecError as error:
        assert error.file is not None
        assert str(error)


def dump(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


# -- (a) arbitrary data ----------------------------------------------------------------------

_EXPERIMENT_SHAPED = st.fixed_dictionaries({}, optional={
    "name": VALUES | st.sampled_from(["x", "quickstart"]),
    "topology": VALUES | st.sampled_from(catalog.names("topology")),
    "workload": VALUES | st.sampled_from(catalog.names("workload")),
    "pipeline": st.lists(st.fixed_dictionaries({}, optional={
        key: VALUES | st.sampled_from(WORDS) for key in
        ("name", "on", "reads", "writes", "cost", "selectivity", "task")}), max_size=3) | VALUES,
    "run": st.fixed_dictionaries({}, optional={
        key: VALUES for key in ("duration", "seed", "backend", "repetitions")}) | VALUES,
    "sweep": st.dictionaries(st.sampled_from(WORDS), st.lists(_LEAVES, max_size=3),
                             max_size=2) | VALUES,
})


@FUZZ
@given(VALUES | _EXPERIMENT_SHAPED)
def test_arbitrary_data_gives_only_spec_errors(data: object) -> None:
    only_spec_errors(dump(data))


# -- (b) mutations of the quickstart ---------------------------------------------------------

def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, prefix + (index,))
    return found


PATHS = _paths(QUICKSTART)[1:]


def _get(data: object, path: tuple) -> object:
    for part in path:
        data = data[part]
    return data


DICT_PATHS = [p for p in [(), *PATHS] if isinstance(_get(QUICKSTART, p), dict)]

_MUTATION = st.one_of(
    st.tuples(st.just("replace"), st.sampled_from(PATHS), VALUES),
    st.tuples(st.just("delete"), st.sampled_from(PATHS), st.none()),
    st.tuples(st.just("add"), st.sampled_from(DICT_PATHS), st.tuples(_KEYS, VALUES)),
)


def _mutate(data: dict, mutation: tuple) -> None:
    action, path, value = mutation
    try:
        if action == "add":
            key, new = value
            target = _get(data, path)
            if isinstance(target, dict):
                target[key] = new
        elif action == "replace":
            _get(data, path[:-1])[path[-1]] = value
        else:
            del _get(data, path[:-1])[path[-1]]
    except (KeyError, IndexError, TypeError):
        pass  # an earlier mutation removed or replaced this place


def test_the_inlined_quickstart_loads_unchanged() -> None:
    experiment = parse_text(dump(QUICKSTART))
    assert experiment.spec.topology.name == "smart-city"
    assert experiment.spec.pipeline[0].on == ["gateways"]


@FUZZ_QUICKSTART
@given(st.lists(_MUTATION, min_size=1, max_size=3))
def test_mutated_quickstart_gives_only_spec_errors(mutations: list[tuple]) -> None:
    data = copy.deepcopy(QUICKSTART)
    for mutation in mutations:
        _mutate(data, mutation)
    only_spec_errors(dump(data))


# -- (c) random text -------------------------------------------------------------------------

_TOKENS = st.sampled_from(
    ["\n", "\n  ", "\n    ", " ", "  ", ": ", ":", "- ", "-", "{", "}", "[", "]", ", ", "'",
     '"', "#", "|", ">", "&a ", "*a", "&b ", "*b", "? ", "---\n", "...\n", "%YAML 1.2\n", "~",
     "\t", "@", "`", "%", "\\", "x", "0", "1.5", "-3", "20ms", "gateways", "true", "null",
     *[f"{field}: " for field in FIELDS], *WORDS])
_YAMLISH = st.lists(_TOKENS, max_size=60).map("".join)


@FUZZ
@given(st.text(max_size=200) | _YAMLISH)
def test_random_text_gives_only_spec_errors(text: str) -> None:
    only_spec_errors(text)


@FUZZ_QUICKSTART
@given(_YAMLISH)
def test_random_text_after_a_valid_head_gives_only_spec_errors(tail: str) -> None:
    only_spec_errors(dump(QUICKSTART) + tail)


# -- what the fuzzing found ------------------------------------------------------------------

def _quickstart_with(path: tuple, value: object) -> str:
    data = copy.deepcopy(QUICKSTART)
    _get(data, path[:-1])[path[-1]] = value
    return dump(data)


@pytest.mark.parametrize("text", [
    "name: 2020-13-45\n",
    "name: !!int abc\n",
    "name: !!float abc\n",
    "name: !!timestamp abc\n",
    "run: {seed: " + "9" * 5000 + "}\n",
], ids=["bad-date", "int-tag", "float-tag", "timestamp-tag", "huge-int"])
def test_yaml_that_pyyaml_cannot_construct_is_a_spec_error(text: str) -> None:
    only_spec_errors(text)


@pytest.mark.parametrize("value", [float("inf"), "1e400B"])
def test_an_infinite_message_size_is_a_spec_error(value: object) -> None:
    only_spec_errors(_quickstart_with(("workload", "streams", 0, "size"), value))


def test_a_very_long_reference_name_is_a_spec_error() -> None:
    only_spec_errors(_quickstart_with(("topology",), "x" * 300))
