"""Edge-ward placement: iFogSim's ModulePlacementEdgewards on the placement problem.

iFogSim (Gupta et al., "iFogSim: A toolkit for modeling and simulation of resource management
techniques in the Internet of Things, Edge and Fog computing environments", 2017) walks each
leaf-to-root path of the fog tree from the leaf up. On each device it places every module whose
inputs are placed on the path (the first in the application's order first) if the device's
capacity covers the module's CPU load (the input rate on this path x the cost) plus the load
already on it; if not, the module waits for the next device up. A module already on the device
(from an earlier path) takes this path's load too; if the device no longer holds it, the module
and the modules downstream of it on that device move north (shiftModuleNorth,
findModulesToShift) to the first parent that holds them all, picking up on each full parent the
modules downstream of them there. A module thus gets an instance on each device where a path
placed it.

Here a path is each device flow of each operator, in the problem's order (the operator's, then
its flows'): the flow's node `at`, then `parent` links up to the top. The loads are the flow's
rate carried through the selectivities (a path's own rates, as iFogSim's appEdgeToRate); the
order of the modules is the pipeline's. A path is walked operator by operator rather than
device by device wherever that is the same walk (no shift north on it: Walk's docstring), which
is what keeps 1,000 operators within milliseconds. Departures from iFogSim, each because the
original loses or miscounts something:
- an operator already on a device that still holds it adds this path's load to the device
  (iFogSim checks it but never adds it, so any number of paths pile onto one device);
- after a shift the receiving device's load is what it had plus what moved (iFogSim sets it to
  what moved alone) and a module's load there adds up (iFogSim overwrites it);
- nothing is dropped: where iFogSim prints "could not place" and leaves a module without an
  instance, this raises Unplaceable (cpu);
- only an operator's candidates count as devices it may take (and move to); an operator none of
  whose candidates is on the path goes to its candidate nearest the path's leaf with room;
- pinned operators (iFogSim's ModuleMapping) never move; one pinned off the path counts as
  placed from the start, its load on its pin nearest the leaf (iFogSim would place none of its
  readers on that path);
- an operator that becomes ready only above the device of the path holding it (its writer
  placed higher) adds its load there, shifting north if full (iFogSim skips it for the path);
- an operator no flow reaches goes to its northmost candidate with room.

Not changed, and worth knowing: iFogSim sends a path's tuples north to the module on the path;
the problem's flow model (evaluate, the backends' routing) serves a flow on its own node when
an instance is there, else splits it equally over every instance through the node's broker,
so an operator with instances on several branches gets a share of other branches' flows. The
walk's books then differ from evaluate's load, and an answer can show overload on such an
instance (benchmarks/placement.py counts how often).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from workloads.placement.base import Policy, register
from workloads.placement.problem import PINNED, ROOM, Decision, Problem, Unplaceable
from workloads.placement.tables import Tables


class Walk:
    """The state of the walk: each node's CPU load, which nodes hold each operator and each
    operator's load on each node (reference-vCPU s/s; (N, J) arrays, so that a path's
    operators are looked up and booked at once), and notes for the reasons.

    A path is walked device by device as iFogSim writes it (`visit`), or, when `fast`, operator
    by operator (`levels`), which is the same walk as long as no device overflows: each
    operator goes to the first device at or above its writers' that holds it, or (none holding
    it) the first candidate there with room, and an operator's room on a device depends only on
    the operators before it there. `levels` keeps its books aside and gives up (None) where a
    device holding an operator would overflow (a shift north): the device walk does that path.
    The tests compare the two on random problems."""

    fast = True

    def __init__(self, t: Tables):
        self.t = t
        self.cap = t.capacity.tolist()
        self.cpu = [0.0] * len(t.names)
        self.cost = t.cost.tolist()
        self.sel = t.selectivity.tolist()
        self.fixed = [p is not None for p in t.pinned]
        self.fixed_mask = np.array(self.fixed, dtype=bool)
        shape = (len(t.names), len(t.cost))
        self.held = np.zeros(shape, dtype=bool)         # node x operator: an instance there
        self.load_on = np.zeros(shape)                  # node x operator: its load there
        self.pending: list[tuple] = []                  # the fast walk's, not yet in load_on
        for k, pins in enumerate(t.pinned):
            if pins is not None:
                self.held[pins, k] = True
        self.notes: dict[int, str] = {}
        self.plans: dict[int, tuple] = {}
        self.paths: dict[int, list[int]] = {}
        n = len(t.names)                    # each operator's candidates as bits of an int
        self.bits = (t.candidates @ (1 << np.arange(n, dtype=np.int64))).tolist() if n < 63 \
            else [sum(1 << e for e in np.flatnonzero(row).tolist()) for row in t.candidates]

    @cached_property
    def candidate(self) -> list[list[bool]]:
        """Operator x node: a candidate (lists, read one at a time off the fast walk)."""
        return self.t.candidates.tolist()

    # -- bookkeeping ------------------------------------------------------------------------

    def settle(self) -> None:
        """The fast walk's books into `load_on`, in the order they were made (read only
        by a shift, and before any other change to it)."""
        for devices, where, rows, loads in self.pending:
            booked = (where >= 0) & (where < len(devices))
            self.load_on[devices[where[booked]], rows[booked]] += loads[booked]
        self.pending.clear()

    def add(self, k: int, node: int, load: float) -> None:
        if self.pending:
            self.settle()
        self.load_on[node, k] += load
        self.held[node, k] = True
        self.cpu[node] += load

    def take(self, k: int, node: int) -> float:
        if self.pending:
            self.settle()
        load = float(self.load_on[node, k])
        self.load_on[node, k] = 0.0
        self.held[node, k] = False
        self.cpu[node] -= load
        return load

    def devices(self, leaf: int) -> list[int]:
        path = self.paths.get(leaf)
        if path is None:
            path, node = [], leaf
            self.paths[leaf] = path
            while node >= 0 and node not in path:
                path.append(node)
                node = self.t.parent[node]
        return path

    def plan(self, j: int) -> tuple[list[int], np.ndarray, np.ndarray, list[int]]:
        """A flow into j: the operators it reaches with a rate (j and every reader of them, in
        pipeline order; as a list and an array), their CPU load per unit of the flow's rate
        (the rate carried through the selectivities, x cost), and the positions of the pinned
        ones."""
        if j not in self.plans:
            t, sel, upstream = self.t, self.sel, self.t.upstream
            factor = [0.0] * len(sel)
            factor[j] = 1.0
            for k in range(j + 1, len(sel)):        # the writers come first
                ups = upstream[k]
                if len(ups) == 1:
                    factor[k] = sel[ups[0]] * factor[ups[0]]
                elif ups:
                    f = 0.0
                    for u in ups:
                        f += sel[u] * factor[u]
                    factor[k] = f
            factor = np.array(factor)
            rows = np.flatnonzero(factor > 0)
            order = rows.tolist()
            self.plans[j] = (order, rows, factor[rows] * t.cost[rows],
                             np.flatnonzero(self.fixed_mask[rows]).tolist())
        return self.plans[j]

    # -- one path ---------------------------------------------------------------------------

    def path(self, j: int, at: int, rate: float) -> None:
        """One flow's path: the operators it reaches, from its node `at` up the parents."""
        if not rate > 0:
            return
        order, rows, unit, pinned = self.plan(j)
        loads = rate * unit
        devices = self.devices(at)
        placed: set[int] = set()
        for i in pinned:
            k = order[i]
            if not self.held[devices, k].any():
                pins = self.t.pinned[k]
                nearest = int(pins[self.t.latency[at, pins].argmin()])
                self.add(k, nearest, float(loads[i]))
                placed.add(k)
        if self.fast:
            holder = np.full(len(order), -1)         # the lowest device of the path holding it
            for p in range(len(devices) - 1, -1, -1):
                holder = np.where(self.held[devices[p]].take(rows), p, holder)
            done = self.levels(at, devices, (order, rows, loads), holder, placed, True)
            if done is False:
                done = self.levels(at, devices, (order, rows, loads), holder, placed, False)
            if done:
                return
        load = dict(zip(order, loads.tolist(), strict=True))
        for device in devices:
            self.visit(device, devices, order, load, placed)
        self.finish(at, devices, order, load, placed)

    def levels(self, at: int, devices: list[int], plan: tuple, holder: np.ndarray,
               placed: set[int], skim: bool) -> bool | None:
        """The path walked operator by operator (see the class's docstring), booked at once:
        True when done (what it leaves goes to `finish`, as in the device walk), None where a
        device holding an operator would overflow (nothing booked: the device walk does it).
        `skim`: only the operators not held at the top of the path go through the loop, those
        held there taken as placed there, and the top's room checked once at the end; False
        (nothing booked) where that does not hold, and the full loop does it."""
        order, rows, loads = plan
        top = len(devices)
        last = top - 1
        cpu = [self.cpu[d] for d in devices]
        cap = [self.cap[d] + ROOM for d in devices]
        fixed, upstream = self.fixed, self.t.upstream
        where = np.where(holder == last, last, -1) if skim else np.full(len(order), -1)
        level = np.zeros(len(self.cost), dtype=int)
        level[rows] = where
        level = level.tolist()                      # by operator: 0 for those not on the path
        todo = np.flatnonzero(where < 0) if skim else range(len(order))
        found: list[int] = []                       # the device (position) of each in `todo`
        later: list[int] = []
        cells: list[int] = []                       # (node, operator) cells newly held
        width = len(self.cost)
        bits = self.bits                            # bit e: a candidate on node e
        for k, load, h in zip(rows[todo].tolist(), loads[todo].tolist(), holder[todo].tolist(),
                              strict=True):
            start = 0
            for u in upstream[k]:
                if level[u] > start:
                    start = level[u]
            if placed and k in placed:
                p = -1
            elif h >= 0:
                p = h if h >= start else top
            else:
                ok, p = bits[k], start
                while p < top and not (ok >> devices[p] & 1 and (
                        skim and p == last or cpu[p] + load <= cap[p])):
                    p += 1
            level[k] = p if p > 0 else 0
            found.append(p)
            if p == top:
                if skim:
                    return False
                later.append(k)
            elif p >= 0:
                cells.append(devices[p] * width + k)
                if not (skim and p == last):
                    cpu[p] += load
                    if cpu[p] > cap[p] and not fixed[k]:
                        return None
        where[todo] = found
        return self.book(at, devices, plan, (where, cells), later, cpu, skim, placed)

    def book(self, at: int, devices: list[int], plan: tuple, found: tuple,
             later: list[int], cpu: list[float], skim: bool, placed: set[int]) -> bool:
        """Book what `levels` found (`where`: each operator's device, as a position on the
        path, -1 and len(devices) for none; `cells`: the (node, operator) cells it adds):
        each one's load on its device (`pending` until a shift reads them), the devices'
        CPU (`cpu`; after a skim the top's is summed here, in the operators' order), then
        `finish`. False (nothing booked) when the top has no room for what the skim put
        there."""
        order, rows, loads = plan
        where, cells = found
        top = len(devices)
        if skim:
            total = np.cumsum(np.concatenate(([cpu[-1]], loads[where == top - 1])))
            if total[-1] > self.cap[devices[-1]] + ROOM:
                return False
            cpu[-1] = float(total[-1])
        self.pending.append((np.asarray(devices), where, rows, loads))
        self.held.reshape(-1)[cells] = True             # a view: (node, operator) cells
        for p, d in enumerate(devices):
            self.cpu[d] = cpu[p]
        if later:
            waiting = set(later)
            self.finish(at, devices, later, dict(zip(order, loads.tolist(), strict=True)),
                        placed | {k for k in order if k not in waiting})
        return True

    def ready(self, k: int, load: dict[int, float], placed: set[int]) -> bool:
        return k not in placed and all(u in placed or u not in load
                                       for u in self.t.upstream[k])

    def visit(self, d: int, devices: list[int], order: list[int], loads: dict[int, float],
              placed: set[int]) -> None:
        """Device d of the path: the ready operators in order (iFogSim's placeModulesInPath
        loop; after a shift it starts again from the first, as iFogSim's list does)."""
        i = 0
        while i < len(order):
            k = order[i]
            i += 1
            if not self.ready(k, loads, placed):
                continue
            holder = next((e for e in devices if self.held[e, k]), -1)
            load = loads[k]
            if holder < 0:
                if self.candidate[k][d] and self.cpu[d] + load <= self.cap[d] + ROOM:
                    self.add(k, d, load)
                    placed.add(k)
            elif holder == d:
                placed.add(k)
                self.add(k, d, load)
                if self.cpu[d] > self.cap[d] + ROOM and not self.fixed[k]:
                    self.shift_north(k, d)
                    i = 0

    def finish(self, at: int, devices: list[int], order: list[int], loads: dict[int, float],
               placed: set[int]) -> None:
        """What the walk left ready but unplaced: the device below holding it takes it (and
        shifts it north if full: iFogSim skips it), or no room (cpu), or (no candidate on the
        path) its candidate nearest the leaf with room."""
        t, progress = self.t, True
        while progress:
            progress = False
            for k in order:
                if not self.ready(k, loads, placed):
                    continue
                load = loads[k]
                held = [e for e in devices if self.held[e, k]]
                on_path = [e for e in devices if self.candidate[k][e]]
                if held:        # ready only above its holder: the holder takes it
                    self.add(k, held[0], load)
                    if self.cpu[held[0]] > self.cap[held[0]] + ROOM and not self.fixed[k]:
                        self.shift_north(k, held[0])
                elif on_path:
                    best = max(on_path, key=lambda e: (self.cap[e] - self.cpu[e], -e))
                    raise Unplaceable(t.problem.operators[k].name, "cpu", (
                        f"needs {load:.4g} reference-vCPU s/s for the flow at {t.names[at]}; "
                        f"the most free on its candidates on the path north is "
                        f"{self.cap[best] - self.cpu[best]:.4g} on {t.names[best]}"))
                else:
                    self.off_path(k, at, load)
                placed.add(k)
                progress = True

    def off_path(self, k: int, at: int, load: float) -> None:
        t = self.t
        room = [e for e in range(len(t.names)) if self.candidate[k][e]
                and self.cpu[e] + load <= self.cap[e] + ROOM]
        if not room:
            raise self.no_room(k, load)
        node = min(room, key=lambda e: (t.latency[at, e], e))
        self.add(k, node, load)
        self.notes[k] = "no candidate on a flow's path north: the one nearest it with room"

    def no_room(self, k: int, load: float) -> Unplaceable:
        t = self.t
        return Unplaceable.no_room(t.problem.operators[k].name, load, {
            t.names[e]: self.cap[e] - self.cpu[e] for e in range(len(t.names))
            if self.candidate[k][e]})

    # -- shifting north ---------------------------------------------------------------------

    def closure(self, start: list[int], node: int) -> list[int]:
        """`start` and the operators downstream of them on `node` (iFogSim's
        findModulesToShift), pinned ones left where they are."""
        found, seen = list(start), set(start)
        for m in found:
            for k in self.t.downstream[m]:
                if k not in seen and self.held[node, k] and not self.fixed[k]:
                    found.append(k)
                    seen.add(k)
        return found

    def shift_north(self, k: int, d: int) -> None:
        """Operator k (over-full on d) and its readers on d to the first parent that holds
        them all, collecting on each full parent the readers of what moves."""
        t = self.t
        moving = self.closure([k], d)
        moved = {m: self.take(m, d) for m in moving}
        total = sum(moved.values())
        p, seen = t.parent[d], {d}
        while True:
            if p < 0 or p in seen:
                raise Unplaceable(t.problem.operators[k].name, "cpu", (
                    f"moving {', '.join(t.problem.operators[m].name for m in moving)} north of "
                    f"{t.names[d]} ({total:.4g} reference-vCPU s/s): no node above has room"))
            if (all(self.candidate[m][p] for m in moving)
                    and self.cpu[p] + total <= self.cap[p] + ROOM):
                break
            grown = self.closure(moving, p)
            for m in grown[len(moving):]:
                moved[m] = self.take(m, p)
                total += moved[m]
            seen.add(p)
            moving, p = grown, t.parent[p]
        for m, load in moved.items():
            self.add(m, p, load)
            self.notes[m] = f"moved north from {t.names[d]} to {t.names[p]}, {t.names[d]} full"

    # -- the answer -------------------------------------------------------------------------

    def leftovers(self) -> None:
        """Operators no flow reached: the northmost candidate with room."""
        t = self.t
        for k, holders in enumerate(self.held.any(axis=0).tolist()):
            if holders:
                continue
            load = float(t.demand[k])
            room = [e for e in range(len(t.names)) if self.candidate[k][e]
                    and self.cpu[e] + load <= self.cap[e] + ROOM]
            if not room:
                raise self.no_room(k, load)
            self.add(k, min(room, key=lambda e: (t.depth[e], e)), load)
            self.notes[k] = "no flow reaches it: the northmost candidate with room"

    def decision(self) -> Decision:
        t = self.t
        ops, nodes = np.nonzero(self.held.T)            # by operator, nodes in order
        names = np.array(t.names, dtype=object)[nodes].tolist()
        ends = np.cumsum(np.bincount(ops, minlength=len(self.cost))).tolist()
        reasons, fixed, notes = {}, self.fixed, self.notes
        placed, start = {}, 0
        for k, (op, end) in enumerate(zip(t.problem.operators, ends, strict=True)):
            placed[op.name] = tuple(names[start:end])
            start = end
            reasons[op.name] = PINNED if fixed[k] else notes.get(
                k, "the lowest node with room on each flow's path north")
        return Decision(placed, reasons)


@register("edge-ward")
class EdgeWard(Policy):
    """iFogSim's edge-ward placement (see the module's docstring for where it departs)."""

    def place(self, problem: Problem) -> Decision:
        t = Tables.of(problem)
        walk = Walk(t)
        for j, op in enumerate(problem.operators):
            for flow in op.flows:
                walk.path(j, t.index[flow.at], flow.rate)
        walk.leftovers()
        return walk.decision()
