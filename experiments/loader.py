"""Loads an experiment file: resolves references, applies overrides, expands sweeps, validates.

Nothing runs before this has passed: every problem becomes a SpecError naming the file (or the
command-line option), the field path, the value and what was expected.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from experiments import catalog
from experiments.checks import check, topology_of
from experiments.placement import placed
from experiments.spec import ExperimentSpec
from topologies import units
from topologies.documents import Document, DuplicateKey, load_text, parse, read
from topologies.errors import SpecError, Withheld, format_path
from topologies.fields import WRITTEN
from topologies.files import Files, Refused
from topologies.model import Topology
from workloads.features import FEATURES
from workloads.jobs import expand as expand_jobs
from workloads.placement.problem import Decision
from workloads.placement.replace import Replanning

REFERENCES = ("topology", "workload")
REFERENCE_PATHS = [(key,) for key in REFERENCES]


@dataclass
class RunPoint:
    """One point of a sweep: the values that make it, the validated spec and its topology."""

    index: int
    values: dict[str, object]
    spec: ExperimentSpec
    topology: Topology
    config_hash: str
    # Written as jobs (workloads.jobs): each job's operators, in the pipeline's names; empty
    # for a flat pipeline (each operator its own job).
    jobs: dict[str, list[str]] = field(default_factory=dict)
    # The placement policy's decision (experiments.placement), taken here, before any backend:
    # `spec` has the `on: auto` operators on the nodes it chose. None without `placement`.
    placement: Decision | None = None
    # With placement.replace: what the run re-places from (workloads.placement.replace).
    replanning: Replanning | None = None


@dataclass
class Experiment:
    file: str
    name: str
    points: list[RunPoint]
    references: dict[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> ExperimentSpec:
        return self.points[0].spec


@dataclass
class _Sources:
    """Where each part of the merged description came from, to place errors."""

    documents: dict[str, Document]  # "" for the experiment file, else its key
    overrides: dict[tuple, str] = field(default_factory=dict)  # path -> the option as typed
    files: Files = field(default_factory=Files.anywhere)  # where the file may read

    def typed(self, path: tuple) -> bool:
        """Whether the command line (--set, --sweep) wrote `path` or a field above it: a path
        typed there is the user's own, relative to where the command runs, not confined."""
        return any(path[:len(at)] == at and option.startswith("--")
                   for at, option in self.overrides.items())

    def place(self, error: SpecError) -> SpecError:
        for path, option in self.overrides.items():
            # Inside what the option set, or above it where no file wrote a mapping or list:
            # the option made that part (`--set nosuch.key=1` makes `nosuch`) or replaced a
            # value the file wrote (`--set run.duration.x=1`).
            if error.path[:len(path)] == path or (
                    error.path and path[:len(error.path)] == error.path
                    and not self._written_container(error.path)):
                return SpecError(error.path, error.value, error.expected, option)
        head = error.path[0] if error.path else ""
        if head in self.documents and head:
            return self.documents[head].error(error, prefix=(head,))
        return self.documents[""].error(error)


    def _written_container(self, path: tuple) -> bool:
        """Whether a file (the experiment's, or the one a reference names) wrote a mapping or
        a list at `path`."""
        head = path[0]
        document = self.documents.get(head) if head else None
        node, parts = (document.data, path[1:]) if document else (self.documents[""].data, path)
        for part in parts:
            if not _has(node, part):
                return False
            node = node[part]
        return isinstance(node, dict | list)


def load(source: str | Path, overrides: list[str] = (), sweeps: list[str] = (),
         allow_files: Iterable[str | Path] = (), zips: list[str] = ()) -> Experiment:
    """Load and validate an experiment from a path or a catalog name. The files it names are
    read from its folder only, and from the folders `allow_files` (and FOGLAB_ALLOW_FILES)
    allow: topologies.files. `zips`: `KEY=[...]` options swept together (paired values)."""
    path = catalog.experiment_path(source)
    return load_document(read(path), overrides, sweeps, Files.confined(path.parent, allow_files),
                         zips)


def load_document(document: Document, overrides: list[str] = (), sweeps: list[str] = (),
                  files: Files | None = None, zips: list[str] = ()) -> Experiment:
    """Validate a parsed experiment file with its references, overrides, sweeps and zipped
    sweeps; the files it names confined to `files` (by default its own folder:
    topologies.files)."""
    files = files or Files.confined(Path(document.file).parent)
    try:
        return _load(document, overrides, sweeps, files, zips)
    except SpecError as error:
        raise _blamed(error, document, overrides, sweeps, files, zips) from None


def _blamed(error: SpecError, document: Document, overrides: list[str],
            sweeps: list[str], files: Files, zips: list[str] = ()) -> SpecError:
    """An error placed in a file that the file alone does not have is the options' doing (a
    --set run.duration shorter than a migration's time): it names the first option that
    brings it on its own, else all of them, rather than a line the user did not change."""
    options = ([f"--set {o}" for o in overrides] + [f"--sweep {s}" for s in sweeps]
               + [f"--zip {z}" for z in zips])
    if not options or error.file in options or (error.file or "").startswith("--"):
        return error

    def same(overrides: list[str], sweeps: list[str], zips: list[str] = ()) -> bool:
        try:
            _load(document, overrides, sweeps, files, zips)
        except SpecError as other:
            return other.path == error.path and other.expected == error.expected
        return False

    if same([], []):
        return error  # the file's own mistake
    cause = next((f"--set {o}" for o in overrides if same([o], [])), None) or next(
        (f"--sweep {s}" for s in sweeps if same([], [s])), None) or next(
        (f"--zip {z}" for z in zips if same([], [], [z])), None) or ", ".join(options)
    return SpecError(error.path, error.value, error.expected, cause)


def _load(document: Document, overrides: list[str], sweeps: list[str],
          files: Files, zips: list[str] = ()) -> Experiment:
    data = document.data
    if not isinstance(data, dict):
        raise SpecError((), Withheld(data), "a mapping with name, topology, workload, pipeline "
                        "and run", document.file, 1)
    sources = _Sources({"": document}, files=files)
    merged = copy.deepcopy(data)
    assignments = [(*_assignment(option, "--set"), f"--set {option}") for option in overrides]
    # `--set topology=<name or file>` replaces a reference before it is resolved.
    for path, value, option in assignments:
        if path in REFERENCE_PATHS:
            merged[path[0]] = value
            sources.overrides[path] = option
    references = _resolve_references(merged, document, sources)
    for i, (path, value, option) in enumerate(assignments):
        if path not in REFERENCE_PATHS:
            # Names resolve against what the file and the options before this one made.
            path = _by_name(merged, path, option)
            assignments[i] = (path, value, option)
            sources.overrides[path] = option
            _assign(merged, path, value, option)
    set_paths = {path for path, _, _ in assignments}
    plans = {}
    for block, options in (("sweep", sweeps), ("zip", zips)):
        plans[block] = _plan(merged, block, options, set_paths, sources)
    for key in plans["zip"]:
        if any(_swept_path(merged, k) == _swept_path(merged, key) for k in plans["sweep"]):
            raise sources.place(SpecError(("zip", key), plans["zip"][key],
                                          "a key not swept too (sweep or zip, not both)"))
    merged["sweep"], merged["zip"] = plans["sweep"], plans["zip"]
    points = [_point(i, merged, values, sources)
              for i, values in enumerate(_product(plans["sweep"], sources, plans["zip"]))]
    return Experiment(document.file, points[0].spec.name, points, references)


def _plan(merged: dict, block: str, options: list[str], set_paths: set,
          sources: _Sources) -> dict[str, list]:
    """The file's `sweep` (or `zip`) block with the command line's --sweep (--zip) options:
    a --set of a key it sweeps sets it for every run (that key's sweep goes, else the sweep's
    values would silently win over the option); an option of a key it sweeps (by any of its
    names) replaces the file's values."""
    plan = merged.get(block, {})
    if not isinstance(plan, dict):
        raise sources.place(SpecError((block,), plan, "a mapping of dotted keys to lists"))
    plan = dict(plan)
    for key in [k for k in plan if _swept_path(merged, k) in set_paths]:
        del plan[key]
    for option in options:
        path, values = _assignment(option, f"--{block}")
        path = _by_name(merged, path, f"--{block} {option}")
        if not isinstance(values, list) or not values:
            raise SpecError((), option, f"--{block} KEY=[v1, v2, ...] with at least one value",
                            f"--{block} {option}")
        if path in set_paths:
            raise SpecError((), option, f"--set or --{block} for one key, not both",
                            f"--{block} {option}")
        for key in [k for k in plan if _swept_path(merged, k) == path]:
            del plan[key]
        plan[".".join(str(p) for p in path)] = values
        sources.overrides[path] = f"--{block} {option}"
    return plan


def _resolve_references(merged: dict, document: Document, sources: _Sources) -> dict[str, str]:
    """Replace `topology: <name or file>` (and workload) by the referenced file's content."""
    references: dict[str, str] = {}
    for key in REFERENCES:
        if isinstance(merged.get(key), str):
            path = reference_file(key, merged[key], document, sources.files,
                                  typed=sources.typed((key,)))
            # A file the experiment names is not shown in errors; a catalog entry is foglab's.
            referenced = read(path, confidential=path.parent != catalog.FOLDERS[key])
            references[key] = merged[key]
            merged[key] = referenced.data
            sources.documents[key] = referenced
    return references


def reference_file(key: str, written: str, document: Document, files: Files,
                   typed: bool = False) -> Path:
    """The file `topology: <written>` (or workload) of `document` stands for: a catalog name,
    or a file the rule of topologies.files lets the experiment read (`typed`: a --set of it,
    the user's own, unconfined)."""
    base = Path(document.file).parent
    unknown = document.error(SpecError(
        (key,), written, f"the name of a {key} in the catalog "
        f"({', '.join(catalog.names(key)) or 'none'}) or a path to a file"))
    if files.folder is None or typed:
        return catalog.reference_path(key, written, base, unknown)
    named = "/" not in written and not written.endswith((".yaml", ".yml"))
    if named and not _present(base / written):  # a file of that name beside it comes first
        entry = catalog.FOLDERS[key] / f"{written}.yaml"
        if not _present(entry):
            raise unknown
        return entry
    try:
        return files.resolve(written, base)
    except Refused as refused:
        raise document.error(SpecError((key,), written, str(refused))) from None


def _present(path: Path) -> bool:
    """Whether there is something at `path` (a link too, even a broken one)."""
    try:
        return path.is_symlink() or path.exists()
    except (OSError, ValueError):  # a name too long for the file system, or with a NUL
        return False


def _file_fields(data: dict) -> list[tuple]:
    """Where the experiment names files: each feature's `files` (workloads.features) under
    its scenario key, and a calibration (run.calibration, scenario.energy.calibration) when
    it is a path rather than a profile's name (a name is foglab's own store, not confined)."""
    from workloads.calibration import is_path

    fields = [("scenario", feature.key, *inner) for feature in FEATURES
              for inner in feature.files]
    for path in (("run", "calibration"), ("scenario", "energy", "calibration")):
        written = _written(data, path)
        if isinstance(written, str) and is_path(written):
            fields.append(path)
    return fields


def _resolve_files(data: dict, sources: _Sources) -> None:
    """Files the experiment file names (its sweep too), relative to its folder (as topology
    and workload references are) and confined to it (topologies.files), rewritten as
    resolved; one refused or not there is named with the path as written and as resolved.
    Paths typed on the command line stay relative to where the command runs (the schema and
    the features check those)."""
    base = Path(sources.documents[""].file).parent
    for path in _file_fields(data):
        node = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(path[-1]), str) or (
                sources.typed(path)):
            continue
        try:
            node[path[-1]] = str(sources.files.resolve(node[path[-1]], base))
        except Refused as refused:
            raise sources.place(SpecError(path, node[path[-1]], str(refused))) from None


# Keys a sweep may not vary, and why: every point of a sweep is one experiment's.
UNSWEPT = {
    "name": "a key other than name: a sweep's runs are one experiment's, kept together under "
            "results/<name>/ (run each name as an experiment of its own)",
}


def _product(plan: dict, sources: _Sources, paired: dict | None = None) -> list[dict[str, object]]:
    """The sweep's points: every combination of `plan`'s values, each with the i-th values of
    the `paired` keys (the `zip` block: all as long as each other) in turn."""
    paired = paired or {}
    for block, keys in (("sweep", plan), ("zip", paired)):
        for key, values in keys.items():
            _sweepable(block, key, values, sources)
    lengths = {key: len(values) for key, values in paired.items()}
    if len(set(lengths.values())) > 1:
        first = next(iter(lengths))
        other = next(k for k in lengths if lengths[k] != lengths[first])
        raise sources.place(SpecError(("zip", other), paired[other], (
            f"{lengths[first]} values, as many as {first}'s: zipped keys pair their values")))
    rows = ([dict(zip(paired, row, strict=True)) for row in zip(*paired.values(), strict=True)]
            or [{}])
    keys = list(plan)
    combos = [(*combo, row) for combo in itertools.product(*(plan[k] for k in keys))
              for row in rows]
    if len(combos) > 10_000:
        raise sources.place(SpecError(("sweep",), f"{len(combos)} runs",
                                      "a sweep of at most 10,000 points"))
    return [{**dict(zip(keys, combo[:-1], strict=True)), **combo[-1]} for combo in combos]


def _sweepable(block: str, key: object, values: object, sources: _Sources) -> None:
    """A key a sweep (or zip) may vary, with a non-empty list of values."""
    if not isinstance(key, str) or not isinstance(values, list) or not values:
        raise sources.place(SpecError((block, str(key)), values,
                                      "a dotted key with a non-empty list of values"))
    if key in UNSWEPT:
        raise sources.place(SpecError((block, key), values, UNSWEPT[key]))
    if key in REFERENCES and any(isinstance(value, str) for value in values):
        raise sources.place(SpecError((block, key), values, (
                f"{key} descriptions written out, or a key inside the {key} "
                f"({key}.{'links.0.latency' if key == 'topology' else 'streams.0.rate'}=[...]): "
                f"a {key} by name or file is one experiment's (run each with --set {key}=NAME)")))


def _point(index: int, merged: dict, values: dict, sources: _Sources) -> RunPoint:
    data = copy.deepcopy(merged)
    for key, value in values.items():
        try:
            path = _by_name(data, _dotted(key), f"sweep.{key}")
            _assign(data, path, value, f"sweep.{key}")
        except SpecError as error:
            raise sources.place(SpecError(("sweep", key), value, error.expected)) from None
    _resolve_files(data, sources)
    try:  # jobs (workloads.jobs) become the pipeline they make; an include's errors are its own
        data, composition = expand_jobs(data, Path(sources.documents[""].file).parent,
                                        files=sources.files)
    except SpecError as error:
        raise (error if error.file else sources.place(error)) from None
    try:
        spec = ExperimentSpec.model_validate(data, context=WRITTEN)
    except ValidationError as exc:
        raise _first_error(exc, data, sources, values) from None
    try:
        topology = topology_of(spec)  # once: the placement and the checks both read it
        resolved = placed(spec, topology)
        spec = resolved.spec
        topology = check(spec, topology)
    except SpecError as error:
        if composition is not None:  # at the job (or the include) that made the operator
            error = composition.placed(error)
            if error.file:
                raise error from None
        raise sources.place(error) from None
    # The point's configuration, not the sweep's list of values (which a longer sweep of the
    # same point changes): what `foglab run --resume` finds a point's earlier run by.
    canonical = json.dumps(spec.model_dump(mode="json", exclude={"sweep", "zip"}),
                           sort_keys=True, separators=(",", ":"))
    jobs = {} if composition is None else {
        job: [op.name for op in ops] for job, ops in composition.jobs.items()}
    return RunPoint(index, values, spec, topology, hashlib.sha256(canonical.encode()).hexdigest(),
                    jobs, resolved.decision, resolved.replanning)


# Pydantic's bounds, as an error says them: `at most 30d`.
_BOUNDS = {"less_than_equal": ("le", "at most"), "less_than": ("lt", "less than"),
           "greater_than_equal": ("ge", "at least"), "greater_than": ("gt", "more than")}


def _bound(item: dict, written: object) -> str | None:
    """A bound the value broke, in the unit the value was written in (`at most 30d` for
    `40d`, not 2592000): pydantic checks the parsed number against the bound in base units."""
    key, words = _BOUNDS.get(item["type"], (None, None))
    limit = (item.get("ctx") or {}).get(key)
    if key is None or isinstance(limit, bool) or not isinstance(limit, int | float):
        return None
    parsed = item.get("input")
    shown = (units.written_like(written, parsed, limit)
             if isinstance(parsed, int | float) and not isinstance(parsed, bool) else None)
    return f"{words} {shown if shown is not None else f'{limit:,g}'}"


# Pydantic's wording for a kind of error, said as foglab's errors say what they expected.
_WORDS = {
    "too_short": lambda ctx: f"at least {ctx.get('min_length', 1)} "
                             f"{'entry' if ctx.get('min_length', 1) == 1 else 'entries'}",
    "too_long": lambda ctx: f"at most {ctx.get('max_length')} entries",
    "dict_type": lambda ctx: "a mapping of fields (name: value)",
    "model_type": lambda ctx: "a mapping of fields (name: value)",
    "model_attributes_type": lambda ctx: "a mapping of fields (name: value)",
    "list_type": lambda ctx: "a list ([a, b] or one entry a line, each after a dash)",
    "float_parsing": lambda ctx: "a number",
    "float_type": lambda ctx: "a number",
    "int_parsing": lambda ctx: "a whole number",
    "int_type": lambda ctx: "a whole number",
    "int_from_float": lambda ctx: "a whole number",
    "bool_parsing": lambda ctx: "true or false",
    "bool_type": lambda ctx: "true or false",
    "string_type": lambda ctx: "text",
}


def _said(item: dict) -> str:
    """What a pydantic error expected, in foglab's words (`_WORDS`), else pydantic's without
    its `Input should be ` and `Value error, ` (`'sim', 'emu' or 'hybrid'`)."""
    if item["type"] in _WORDS:
        return _WORDS[item["type"]](item.get("ctx") or {})
    return item["msg"].removeprefix("Value error, ").removeprefix("Input should be ")


def _first_error(exc: ValidationError, data: dict, sources: _Sources, values: dict) -> SpecError:
    errors = []
    # A misspelt or misplaced field first: the fields it leaves missing follow from it.
    items = sorted(exc.errors(include_url=False), key=lambda i: i["type"] != "extra_forbidden")
    for item in items:
        path = _data_path(data, item["loc"])
        message = _said(item)
        if item["type"] == "missing":
            message = "a value: this field is required"
            value = None
        else:
            value = item.get("input")
        if (bound := _bound(item, _written(data, path))) is not None:
            message, value = bound, _written(data, path)
        if item["type"] == "extra_forbidden":
            message = "no such field here; check its spelling and indentation"
        error = sources.place(SpecError(path, value, message))
        if values:
            error = SpecError(error.path, error.value, error.expected + f" (sweep point {values})",
                              error.file, error.line)
        errors.append(error)
    first = errors[0]
    if len(errors) > 1:
        more = "; ".join(f"{format_path(e.path)}: {e.expected}" for e in errors[1:4])
        first = SpecError(first.path, first.value,
                          f"{first.expected} [and {len(errors) - 1} more: {more}]",
                          first.file, first.line)
    return first


def _data_path(data: object, loc: tuple) -> tuple:
    """Pydantic's location without the tags it adds for unions (`bursty`, `function-after[...]`)."""
    path: list = []
    node = data
    for part in loc:
        if _has(node, part):
            path.append(part)
            node = node[part]
            continue
        tag = isinstance(part, str) and ("[" in part or part[:1].isupper() or (
            isinstance(node, dict) and node.get("kind") == part))
        if not tag:
            path.append(part)  # a missing field still belongs in the path
            node = None
    return tuple(path)


def _written(data: object, path: tuple) -> object:
    """The value at `path` as written (`40d`), before the schema parsed it; None if none."""
    for part in path:
        if not _has(data, part):
            return None
        data = data[part]
    return data


def _has(node: object, part: object) -> bool:
    """Whether a parsed YAML mapping or list has `part` (a key, or an index in range)."""
    return (isinstance(node, dict) and part in node) or (
        isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node))


def _assignment(option: str, flag: str) -> tuple[tuple, object]:
    key, sep, text = option.partition("=")
    if not sep or not key.strip():
        raise SpecError((), option, f"{flag} KEY=VALUE, for example run.seed=3", f"{flag} {option}")
    try:
        value = load_text(text) if text.strip() else ""
    except DuplicateKey as exc:
        raise SpecError(_dotted(key.strip()), text, f"a value with each key written once "
                        f"({exc.key!r} is written twice)", f"{flag} {option}") from None
    except yaml.YAMLError:
        value = text
    return _dotted(key.strip()), value


# A part of a key: `name`, or `[0]` / `[name]` in brackets, as errors write a field's path
# (`pipeline[0].cost`); a bracket keeps a name with dots whole (`profiles[vm.small]`).
_PART = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")


def _dotted(key: str) -> tuple:
    """`pipeline.0.cost` and `pipeline[0].cost` -> ('pipeline', 0, 'cost')."""
    parts = [bracketed or plain for bracketed, plain in _PART.findall(key)]
    return tuple(int(part) if part.isdigit() else part for part in parts)


def _swept_path(data: dict, key: object) -> tuple:
    """The path a sweep key of the file names, its names as indices where they resolve."""
    try:
        return _by_name(data, _dotted(str(key)), f"sweep.{key}")
    except SpecError:
        return _dotted(str(key))  # refused where the sweep is expanded


def _by_name(data: dict, path: tuple, option: str) -> tuple:
    """`path` with names of list entries as their indices: `pipeline.filter.cost` is
    `pipeline.0.cost` where the pipeline's first operator is named filter (operators, nodes,
    sites: any list whose entries have a `name`)."""
    node: object = data
    resolved: list = []
    for i, part in enumerate(path):
        if isinstance(node, list) and isinstance(part, str):
            names = [item.get("name") if isinstance(item, dict) else None for item in node]
            if part not in names:
                known = ", ".join(str(n) for n in names if n is not None)
                raise SpecError(path[:i + 1], part, f"an index (0 to {len(node) - 1}) or the "
                                f"name of an entry of {format_path(tuple(resolved))}"
                                + (f" ({known})" if known else ": its entries have no names"),
                                option)
            part = names.index(part)
        resolved.append(part)
        node = node[part] if _has(node, part) else None
    return tuple(resolved)


def _assign(data: dict, path: tuple, value: object, option: str) -> None:
    if not path:
        raise SpecError(path, value, "a key: a dotted path into the description "
                        "(run.duration, pipeline.0.cost)", option)
    node = data
    for i, part in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(node, dict):
            if part not in node or not isinstance(node[part], dict | list):
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            raise SpecError(path, value, f"a path into the description ({format_path(path[:i+1])} "
                            "is not there)", option)
    last = path[-1]
    if isinstance(node, dict) or (
            isinstance(node, list) and isinstance(last, int) and last < len(node)):
        node[last] = value
    else:
        raise SpecError(path, value, "a path into the description", option)


def parse_text(text: str, file: str = "<text>", overrides: list[str] = (),
               sweeps: list[str] = (), confined: bool = False,
               allow_files: Iterable[str | Path] = ()) -> Experiment:
    """Load an experiment from YAML text (tests and notebooks); references resolve from the
    folder of `file`. Text handed over from Python is the caller's own: the files it names
    are read wherever they are, unless `confined` (to that folder and `allow_files`, as
    `load` does: topologies.files). Their content is kept out of errors either way."""
    files = (Files.confined(Path(file).parent, allow_files) if confined or allow_files
             else Files.anywhere())
    return load_document(parse(text, file), overrides, sweeps, files)
