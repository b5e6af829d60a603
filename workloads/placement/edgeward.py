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
order of the modules is the pipeline's. Departures from iFogSim, each because the original
loses or miscounts something:
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

from workloads.placement.base import Policy, register
from workloads.placement.problem import Decision, Problem, Unplaceable
from workloads.placement.tables import Tables

ROOM = 1e-9     # slack on capacity (reference-vCPU s/s): a sum equal to the capacity fits


class Walk:
    """The state of the walk: each node's CPU load, which nodes hold each operator and each
    operator's load on each node (reference-vCPU s/s), and notes for the reasons."""

    def __init__(self, t: Tables):
        self.t = t
        self.cap = t.capacity.tolist()
        self.cpu = [0.0] * len(t.names)
        self.cost = t.cost.tolist()
        self.sel = t.selectivity.tolist()
        self.candidate = t.candidates.tolist()
        self.fixed = [p is not None for p in t.pinned]
        self.holders: list[set[int]] = [set(p.tolist()) if p is not None else set()
                                        for p in t.pinned]
        self.module_load: dict[tuple[int, int], float] = {}
        self.notes: dict[int, str] = {}
        self.reach: dict[int, list[int]] = {}

    # -- bookkeeping ------------------------------------------------------------------------

    def add(self, k: int, node: int, load: float) -> None:
        self.module_load[node, k] = self.module_load.get((node, k), 0.0) + load
        self.holders[k].add(node)
        self.cpu[node] += load

    def take(self, k: int, node: int) -> float:
        load = self.module_load.pop((node, k), 0.0)
        self.holders[k].discard(node)
        self.cpu[node] -= load
        return load

    def devices(self, leaf: int) -> list[int]:
        path, node = [], leaf
        while node >= 0 and node not in path:
            path.append(node)
            node = self.t.parent[node]
        return path

    def rates(self, j: int, rate: float) -> dict[int, float]:
        """The flow's rate through j and every operator reading from it (rate > 0 only)."""
        if j not in self.reach:
            found, todo = {j}, [j]
            while todo:
                for k in self.t.downstream[todo.pop()]:
                    if k not in found:
                        found.add(k)
                        todo.append(k)
            self.reach[j] = sorted(found)
        rates = {j: rate}
        for k in self.reach[j][1:]:
            r = sum(self.sel[u] * rates[u] for u in self.t.upstream[k] if u in rates)
            if r > 0:
                rates[k] = r
        return rates if rate > 0 else {}

    # -- one path ---------------------------------------------------------------------------

    def path(self, j: int, at: int, rate: float) -> None:
        rates = self.rates(j, rate)
        order = list(rates)
        devices = self.devices(at)
        placed: set[int] = set()
        for k in order:
            pins = self.t.pinned[k]
            if pins is not None and not self.holders[k] & set(devices):
                nearest = int(pins[self.t.latency[at, pins].argmin()])
                self.add(k, nearest, rates[k] * self.cost[k])
                placed.add(k)
        for device in devices:
            self.visit(device, devices, order, rates, placed)
        self.finish(at, devices, order, rates, placed)

    def ready(self, k: int, rates: dict[int, float], placed: set[int]) -> bool:
        return k not in placed and all(u in placed or u not in rates
                                       for u in self.t.upstream[k])

    def visit(self, d: int, devices: list[int], order: list[int], rates: dict[int, float],
              placed: set[int]) -> None:
        """Device d of the path: the ready operators in order (iFogSim's placeModulesInPath
        loop; after a shift it starts again from the first, as iFogSim's list does)."""
        i = 0
        while i < len(order):
            k = order[i]
            i += 1
            if not self.ready(k, rates, placed):
                continue
            holder = next((e for e in devices if e in self.holders[k]), -1)
            load = rates[k] * self.cost[k]
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

    def finish(self, at: int, devices: list[int], order: list[int], rates: dict[int, float],
               placed: set[int]) -> None:
        """What the walk left ready but unplaced: the device below holding it takes it (and
        shifts it north if full: iFogSim skips it), or no room (cpu), or (no candidate on the
        path) its candidate nearest the leaf with room."""
        t, progress = self.t, True
        while progress:
            progress = False
            for k in order:
                if not self.ready(k, rates, placed):
                    continue
                load = rates[k] * self.cost[k]
                held = [e for e in devices if e in self.holders[k]]
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
        mine = [e for e in range(len(t.names)) if self.candidate[k][e]]
        name = t.problem.operators[k].name
        if not mine:
            return Unplaceable(name, "route", "it has no candidate node")
        best = max(mine, key=lambda e: (self.cap[e] - self.cpu[e], -e))
        return Unplaceable(name, "cpu", f"needs {load:.4g} reference-vCPU s/s; the most free "
                           f"on its candidates is {self.cap[best] - self.cpu[best]:.4g} on "
                           f"{t.names[best]}")

    # -- shifting north ---------------------------------------------------------------------

    def closure(self, start: list[int], node: int) -> list[int]:
        """`start` and the operators downstream of them on `node` (iFogSim's
        findModulesToShift), pinned ones left where they are."""
        found, seen = list(start), set(start)
        for m in found:
            for k in self.t.downstream[m]:
                if k not in seen and node in self.holders[k] and not self.fixed[k]:
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
        for k, holders in enumerate(self.holders):
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
        nodes, reasons = {}, {}
        for k, op in enumerate(t.problem.operators):
            nodes[op.name] = tuple(t.names[e] for e in sorted(self.holders[k]))
            reasons[op.name] = "pinned by `on`" if self.fixed[k] else self.notes.get(
                k, "the lowest node with room on each flow's path north")
        return Decision(nodes, reasons)


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
