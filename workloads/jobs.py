"""Jobs: a pipeline written as named jobs composed across sites, expanded to its operators.

SpecK (Battulga, Miorandi, Tedeschi, DAIS 2021) describes a stream application as a
composition of jobs, each with its placement and the streams it reads and writes, and
re-applies a changed description as differences. Here a job is a named group of operators
(`workloads.pipeline.OperatorSpec`), its placement may name a site (`on: site:north`: every
gateway and cloud VM of that site), and a file stays short through parameters (`${name}`) and
includes (a file of jobs reused with its own parameters, one include per site). The
composition EXPANDS to the flat pipeline: the operators written as `pipeline:` would give, so
sim and emu run it unchanged; `workloads.apply` diffs two compositions job by job.

An experiment with jobs:

    params: {window: 10s}                      # values for ${name} in this file's jobs
    jobs:
      - include: speck-jobs/edge.yaml          # relative to the experiment file's folder,
                                               # and inside it (topologies.files)
        with: {site: north}                    # the include's declared parameters
      - name: merge                            # a job of one operator: its fields inline
        on: site:cloud
        reads: clean-+
        window: {size: "${window}"}
      - name: report                           # a job of several: operator `report-count`
        on: cloud-1
        operators:
          - {name: count, reads: merge}

An include file declares its parameters (a default, or null when the include must give one)
and its jobs: `{params: {site: null}, jobs: [...]}`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from topologies.documents import Document, read
from topologies.errors import SpecError, first_error
from topologies.fields import WRITTEN
from topologies.files import Files, Refused
from workloads.pipeline import SITE, SITE_KINDS, OperatorSpec, topic_filter
from workloads.topics import matches

# The keys the experiment file gives up for jobs (the loader's ExperimentSpec never sees them).
KEYS = ("jobs", "params")
INCLUDE_KEYS = ("include", "with")
MAX_INCLUDE_DEPTH = 16
_REFERENCE = re.compile(r"\$\{([^{}]*)\}")
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Composition:
    """The expanded jobs: each job's operators in order, and the flat pipeline they make."""

    jobs: dict[str, list[OperatorSpec]] = field(default_factory=dict)
    pipeline: list[dict] = field(default_factory=list)  # the operators as written, expanded
    # Where each operator of the pipeline was written: its file, its entry, its job's entry
    # and the keys its entry gives itself (an `on` it does not give is its job's).
    origins: list[tuple[_Source, tuple, tuple, frozenset]] = field(default_factory=list)

    def placed(self, error: SpecError) -> SpecError:
        """An error the experiment's checks found at `pipeline[i]...` placed where that
        operator was written (an include's file and line, or the experiment's job, which its
        loader places); any other error as it was."""
        path = error.path
        if len(path) < 2 or path[0] != "pipeline" or not isinstance(path[1], int) or not (
                0 <= path[1] < len(self.origins)):
            return error
        source, entry, job, own = self.origins[path[1]]
        rest = path[2:]
        at = (*job, *rest) if rest[:1] == ("on",) and "on" not in own else (
            entry if rest[:1] == ("name",) else (*entry, *rest))
        return source.fail(at, error.value, error.expected)


@dataclass(frozen=True)
class _Source:
    """Where a part was written: an include's document, or (None) the experiment file, whose
    errors its loader places."""

    document: Document | None
    base: Path
    files: Files  # where includes may be read from (the experiment's folder: topologies.files)
    chain: tuple[Path, ...] = ()  # the includes that led here, to refuse a loop

    def fail(self, path: tuple, value: object, expected: str) -> SpecError:
        error = SpecError(path, value, expected)
        return self.document.error(error) if self.document is not None else error


def expand(data: dict, base: Path, document: Document | None = None,
           files: Files | None = None) -> tuple[dict, Composition | None]:
    """The experiment's data with `jobs` (and `params`) expanded into `pipeline`, and the
    composition (to place the later checks' errors: `Composition.placed`); the data as it
    was and None when it has no jobs. `base` is the experiment file's folder, where includes
    resolve; `files` where they may be (by default inside `base`: topologies.files)."""
    if not isinstance(data, dict) or "jobs" not in data:
        if isinstance(data, dict) and "params" in data:
            raise _Source(document, base, Files.anywhere()).fail(
                ("params",), data["params"], "params only beside jobs (they fill ${name} "
                "in the jobs)")
        return data, None
    composition = compose(data, base, document, files)
    expanded = {key: value for key, value in data.items() if key not in KEYS}
    expanded["pipeline"] = composition.pipeline
    return expanded, composition


def compose(data: dict, base: Path, document: Document | None = None,
            files: Files | None = None) -> Composition:
    """The jobs of an experiment's data, expanded and checked: every refusal names the file
    (the include's, or the experiment's through its loader), the field path and the value
    (an include's values by their line and column only: Document.confidential)."""
    source = _Source(document, base, files or Files.confined(base))
    if "pipeline" in data:
        raise source.fail(("pipeline",), "pipeline and jobs",
                          "either a pipeline or jobs, not both")
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise source.fail(("params",), params, "a mapping of parameter names to values")
    for name in params:
        _check_name(source, ("params", name), name)
    jobs: list[tuple[dict, _Source, tuple]] = []
    _collect(data.get("jobs"), ("jobs",), source, params, jobs)
    if not jobs:
        raise source.fail(("jobs",), data.get("jobs"), "at least one job")
    composition = Composition()
    where: dict[str, tuple[_Source, tuple]] = {}
    sites = _sites(data.get("topology"))
    for job, job_source, path in jobs:
        name = job.get("name")
        if name in composition.jobs:
            earlier = where[name][1]
            raise job_source.fail((*path, "name"), name, "a job name used once (it names "
                                  f"the job at {_shown(where[name][0], earlier)} too)")
        operators = _operators(job, job_source, path, sites)
        composition.jobs[name] = [spec for spec, _, _ in operators]
        composition.pipeline.extend(written for _, written, _ in operators)
        composition.origins.extend((job_source, here, path, frozenset(_keys(job, here, path)))
                                   for _, _, here in operators)
        where[name] = (job_source, path)
    names = [op["name"] for op in composition.pipeline]
    repeated = next((n for n in names if names.count(n) > 1), None)
    if repeated is not None:
        job = next(j for j, ops in composition.jobs.items() if repeated in [o.name for o in ops])
        job_source, path = where[job]
        raise job_source.fail(path, repeated, "operator names used once across the jobs "
                              f"({repeated} is made twice: a job's operator is named "
                              "JOB-OPERATOR)")
    _refuse_cycles(composition, where)
    return composition


def _collect(entries: object, path: tuple, source: _Source, params: dict,
             out: list[tuple[dict, _Source, tuple]]) -> None:
    """Jobs written at `path`, includes followed, parameters filled in, in order."""
    if not isinstance(entries, list):
        raise source.fail(path, entries, "a list of jobs and includes")
    for index, entry in enumerate(entries):
        here = (*path, index)
        if not isinstance(entry, dict):
            raise source.fail(here, entry, "a job (a mapping with a name) or an include "
                              "(include: FILE, with: {...})")
        if "include" in entry:
            extra = sorted(set(entry) - set(INCLUDE_KEYS))
            if extra:
                raise source.fail((*here, extra[0]), entry[extra[0]],
                                  "an include has only include and with")
            given = _substitute(entry.get("with", {}), params, (*here, "with"), source)
            if not isinstance(given, dict):
                raise source.fail((*here, "with"), given, "a mapping of the include's "
                                  "parameters to values")
            _include(entry["include"], given, here, source, out)
        else:
            out.append((_substitute(entry, params, here, source), source, here))


def _include(written: object, given: dict, path: tuple, source: _Source,
             out: list[tuple[dict, _Source, tuple]]) -> None:
    if not isinstance(written, str) or not written.strip():
        raise source.fail((*path, "include"), written, "a file of jobs (YAML), relative to "
                          "the file that includes it")
    try:  # relative to the including file's folder, inside the experiment's
        resolved = source.files.resolve(written, source.base)
    except Refused as refused:
        raise source.fail((*path, "include"), written, f"{refused} (an include is relative "
                          "to the including file's folder)") from None
    if resolved in source.chain or len(source.chain) >= MAX_INCLUDE_DEPTH:
        raise source.fail((*path, "include"), written, "an include that does not include "
                          "itself again (it is already open: "
                          + " -> ".join(p.name for p in source.chain) + ")")
    document = read(resolved, confidential=True)  # its values stay out of errors
    inner = _Source(document, resolved.parent, source.files, (*source.chain, resolved))
    data = document.data
    if not isinstance(data, dict) or "jobs" not in data:
        raise inner.fail((), data, "a file of jobs: a mapping with jobs (and params it "
                         "declares)")
    extra = sorted(set(data) - set(KEYS))
    if extra:
        raise inner.fail((extra[0],), data[extra[0]], "a file of jobs has only params and "
                         "jobs")
    declared = data.get("params") or {}
    if not isinstance(declared, dict):
        raise inner.fail(("params",), declared, "a mapping of parameter names to defaults "
                         "(null: the include must give it)")
    for name in declared:
        _check_name(inner, ("params", name), name)
    for name, value in given.items():
        if name not in declared:
            raise source.fail((*path, "with", name), value, "a parameter the included file "
                              f"declares under params ({', '.join(declared) or 'none'})")
    values = {**declared, **given}
    missing = [name for name, value in values.items() if value is None]
    if missing:
        raise source.fail((*path, "with"), given, f"a value for {missing[0]}: {written} "
                          "declares it without a default")
    _collect(data["jobs"], ("jobs",), inner, values, out)


def _check_name(source: _Source, path: tuple, name: object) -> None:
    if not isinstance(name, str) or not _PARAM_NAME.match(name):
        raise source.fail(path, name, "a parameter name: letters, digits and _, not first a "
                          "digit")


def _substitute(value: object, params: dict, path: tuple, source: _Source) -> object:
    """`value` with each `${name}` filled in; a string that is one `${name}` alone takes the
    parameter's value as it is (a number stays a number)."""
    if isinstance(value, dict):
        return {key: _substitute(item, params, (*path, key), source)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, params, (*path, i), source) for i, item in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value
    for name in _REFERENCE.findall(value):
        if name not in params:
            raise source.fail(path, value, f"${{{name}}} naming a declared parameter ("
                              + (", ".join(params) or "none declared") + ")")
    whole = _REFERENCE.fullmatch(value)
    if whole:
        return params[whole.group(1)]
    return _REFERENCE.sub(lambda m: str(params[m.group(1)]), value)


def _operators(job: dict, source: _Source, path: tuple,
               sites: dict[str, bool] | None) -> list[tuple[OperatorSpec, dict, tuple]]:
    """A job's operators, validated where they were written: its own fields for a job of one
    operator, else each of `operators` named JOB-NAME and placed where the job is unless
    it says otherwise."""
    name = job.get("name")
    if not isinstance(name, str):
        raise source.fail((*path, "name"), name, "a job name (a-z, 0-9, _ . -)")
    if "operators" not in job:
        written = [(dict(job), path)]
    else:
        extra = sorted(set(job) - {"name", "on", "operators"})
        if extra:
            raise source.fail((*path, extra[0]), job[extra[0]], "a job with operators has "
                              "only name, on and operators (each operator has its own fields)")
        entries = job["operators"]
        if not isinstance(entries, list) or not entries:
            raise source.fail((*path, "operators"), entries, "a list of at least one operator")
        written = []
        for index, entry in enumerate(entries):
            here = (*path, "operators", index)
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise source.fail(here, entry, "an operator: a mapping with a name")
            op = {**({"on": job["on"]} if "on" in job else {}), **entry,
                  "name": f"{name}-{entry['name']}"}
            written.append((op, here))
    result = []
    for op, here in written:
        own = _keys(job, here, path)
        try:
            spec = OperatorSpec.model_validate(op, context=WRITTEN)
        except ValidationError as exc:
            error = first_error(exc, op)
            at = error.path
            if at[:1] == ("name",) and here != path:
                at = ()  # the made name JOB-NAME: the operator's entry
            if at[:1] == ("on",) and "on" not in own:
                here = path  # inherited from the job
            raise source.fail((*here, *at), error.value, error.expected) from None
        _check_sites(spec.on, (*(here if "on" in own else path), "on"), source, sites)
        result.append((spec, op, here))
    return result


def _keys(job: dict, here: tuple, path: tuple) -> set:
    """The keys written at `here` (the job's own entry, or one of its operators)."""
    if here == path:
        return set(job)
    return set(job["operators"][here[-1]])


def _check_sites(on: list[str], path: tuple, source: _Source,
                 sites: dict[str, bool] | None) -> None:
    if sites is None:
        return  # the topology is itself invalid: its own errors come first
    for index, where in enumerate(on):
        if not where.startswith(SITE):
            continue
        site = where[len(SITE):]
        at = path if len(on) == 1 and path[-1] == "on" else (*path, index)
        usable = sorted(s for s, hosts in sites.items() if hosts)
        if site not in sites:
            raise source.fail(at, where, "site:NAME of a site the topology declares ("
                              + (", ".join(sorted(sites)) or "none") + ")")
        if not sites[site]:
            raise source.fail(at, where, f"a site with gateways or cloud VMs ({site} has "
                              f"none; these do: {', '.join(usable) or 'none'})")


def _sites(topology: object) -> dict[str, bool] | None:
    """The topology's sites as written, each with whether a gateway or cloud VM is in it;
    None when the topology is not (yet) a mapping."""
    if not isinstance(topology, dict) or not isinstance(topology.get("sites", []), list):
        return None
    sites = {s["name"]: False for s in topology.get("sites", [])
             if isinstance(s, dict) and isinstance(s.get("name"), str)}
    for node in topology.get("nodes", []) or []:
        if isinstance(node, dict) and node.get("site") in sites and node.get(
                "kind") in SITE_KINDS:
            sites[node["site"]] = True
    return sites


def _refuse_cycles(composition: Composition, where: dict[str, tuple[_Source, tuple]]) -> None:
    """A job that reads, through other jobs, what it writes itself loops its messages: refused
    at the read that closes the loop (the last job declared in it)."""
    import networkx as nx

    writes = {job: {op.writes for op in ops if op.writes} for job, ops in
              composition.jobs.items()}
    graph = nx.DiGraph()
    graph.add_nodes_from(composition.jobs)
    why: dict[tuple[str, str], tuple[str, str]] = {}
    for reader, ops in composition.jobs.items():
        for op in ops:
            for wanted in op.reads:
                for writer, streams in writes.items():
                    for stream in sorted(streams):
                        if writer != reader and matches(topic_filter(wanted), f"{stream}/x"):
                            graph.add_edge(writer, reader)
                            why.setdefault((writer, reader), (wanted, stream))
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return
    order = list(composition.jobs)
    writer, reader = max(cycle, key=lambda edge: order.index(edge[1]))
    wanted, _ = why[(writer, reader)]
    loop = " -> ".join(f"{a} ({why[(a, b)][1]})" for a, b in cycle) + f" -> {cycle[0][0]}"
    source, path = where[reader]
    raise source.fail(path, reader, f"jobs without a cycle, but {reader} reads {wanted!r} and "
                      f"the jobs feed each other in a loop: {loop}")


def _shown(source: _Source, path: tuple) -> str:
    from topologies.errors import format_path

    file = source.document.file if source.document is not None else "the experiment file"
    return f"{file} {format_path(path)}"
