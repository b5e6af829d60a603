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
    """The state of the walk: each node's CPU load, which operators each node holds (the bits
    of one int per node, `bits_on`: a path's operators are looked up a few int operations at
    a time), each operator's load on each node (reference-vCPU s/s, an (N, J) array), and
    notes for the reasons.

    A path is walked device by device as iFogSim writes it (`visit`), or, when `fast`, operator
    by operator (`skim`, else `levels`), which is the same walk as long as no device
    overflows: each operator goes to the first device at or above its writers' that holds it,
    or (none holding it) the first candidate there with room, and an operator's room on a
    device depends only on the operators before it there. `skim` and `levels` keep their books
    aside and give up (None) where a device holding an operator would overflow (a shift
    north): the device walk does that path. The tests compare the two on random problems."""

    fast = True

    def __init__(self, t: Tables):
        self.t = t
        self.cap = t.capacity.tolist()
        self.cpu = [0.0] * len(t.names)
        self.cost = t.cost.tolist()
        self.sel = t.selectivity.tolist()
        # each operator's one writer; -1: several, -2: none
        self.writer = [ups[0] if len(ups) == 1 else -1 if ups else -2 for ups in t.upstream]
        self.fixed = [p is not None for p in t.pinned]
        self.fixed_mask = np.frombuffer(bytes(self.fixed), dtype=bool)
        self.pending: list = []                         # books not yet in load_on (`settle`)
        self.bit = [1 << k for k in range(len(t.cost))]
        self.bits_on = [0] * len(t.names)               # bit k: an instance of operator k
        for k, pins in enumerate(t.pinned):
            if pins is not None:
                for node in pins.tolist():
                    self.bits_on[node] |= self.bit[k]
        self.notes: dict[int, str] = {}
        self.plans: dict[int, tuple] = {}
        self.paths: dict[int, list[int]] = {}
        self.tops: dict[tuple[int, int], tuple] = {}    # Walk.on_top's
        self.bits = candidate_bits(t.candidates)

    @cached_property
    def candidate(self) -> list[list[bool]]:
        """Operator x node: a candidate (lists, read one at a time off the fast walk)."""
        return self.t.candidates.tolist()

    @cached_property
    def load_on(self) -> np.ndarray:
        """(N, J) reference-vCPU s/s: operator k's load on node n (made when first booked:
        only a shift north reads it)."""
        return np.zeros((len(self.cap), len(self.cost)))

    @property
    def held(self) -> np.ndarray:
        """(N, J) bool: node n holds an instance of operator k (`bits_on` as an array)."""
        width = (len(self.cost) + 7) // 8
        raw = np.frombuffer(b"".join(bits.to_bytes(width, "little") for bits in self.bits_on),
                            dtype=np.uint8).reshape(len(self.bits_on), width)
        return np.unpackbits(raw, axis=1, count=len(self.cost), bitorder="little").view(bool)

    # -- bookkeeping ------------------------------------------------------------------------

    def settle(self) -> None:
        """The fast walk's books into `load_on`, in the order they were made (read only by a
        shift, and before any other change to it): (node, operators, loads) at a path's top,
        a list of (node, operator, load) below it."""
        for entry in self.pending:
            nodes, ops, loads = zip(*entry, strict=True) if isinstance(entry, list) else entry
            self.load_on[nodes, ops] += loads
        self.pending.clear()

    def add(self, k: int, node: int, load: float) -> None:
        if self.pending:
            self.settle()
        self.load_on[node, k] += load
        self.bits_on[node] |= self.bit[k]
        self.cpu[node] += load

    def take(self, k: int, node: int) -> float:
        if self.pending:
            self.settle()
        load = float(self.load_on[node, k])
        self.load_on[node, k] = 0.0
        self.bits_on[node] &= ~self.bit[k]
        self.cpu[node] -= load
        return load

    def holds(self, node: int, k: int) -> bool:
        return bool(self.bits_on[node] & self.bit[k])

    def devices(self, leaf: int) -> list[int]:
        path = self.paths.get(leaf)
        if path is None:
            path, node = [], leaf
            self.paths[leaf] = path
            while node >= 0 and node not in path:
                path.append(node)
                node = self.t.parent[node]
        return path

    def plan(self, j: int) -> tuple:
        """A flow into j: the operators it reaches with a rate (j and every reader of them, in
        pipeline order; as a list, an array and the bits of an int), their CPU load per unit
        of the flow's rate (the rate carried through the selectivities, x cost; for them, and
        for every operator as an array and a list, 0 for the others), and the positions of the
        pinned ones."""
        if j not in self.plans:
            sel, upstream = self.sel, self.t.upstream
            factor = [0.0] * len(sel)
            factor[j] = 1.0
            for k, u in enumerate(self.writer[j + 1:], j + 1):    # the writers come first
                if u >= 0:
                    factor[k] = sel[u] * factor[u]
                elif u == -1:
                    f = 0.0
                    for w in upstream[k]:
                        f += sel[w] * factor[w]
                    factor[k] = f
            factor = np.array(factor)
            reached = factor > 0
            rows = np.flatnonzero(reached)
            every = np.where(reached, factor * self.t.cost, 0.0)
            self.plans[j] = (rows.tolist(), rows, every[rows],
                             np.flatnonzero(self.fixed_mask[rows]).tolist(),
                             members_bits(reached), every, every.tolist())
        return self.plans[j]

    # -- one path ---------------------------------------------------------------------------

    def path(self, j: int, at: int, rate: float) -> None:
        """One flow's path: the operators it reaches, from its node `at` up the parents."""
        if not rate > 0:
            return
        order, rows, unit, pinned = self.plan(j)[:4]
        devices = self.devices(at)
        placed: set[int] = set()
        for i in pinned:
            k = order[i]
            if not any(self.holds(d, k) for d in devices):
                pins = self.t.pinned[k]
                nearest = int(pins[self.t.latency[at, pins].argmin()])
                self.add(k, nearest, float(rate * unit[i]))
                placed.add(k)
        if self.fast:
            done = self.skim(j, devices, rate, placed)
            if done is False:
                done = self.levels(at, devices, (order, rows, rate * unit), placed)
            if done:
                return
        load = dict(zip(order, (rate * unit).tolist(), strict=True))
        for device in devices:
            self.visit(device, devices, order, load, placed)
        self.finish(at, devices, order, load, placed)

    def skim(self, j: int, devices: list[int], rate: float, placed: set[int]) -> bool | None:
        """The path walked operator by operator (see the class's docstring), only the
        operators not held at its top (and at no device below) going through the loop: those
        are taken as placed there, and the top's room is checked once at the end, in the
        operators' order. True when done, None where a device holding an operator would
        overflow, False (nothing booked either way) where an operator reaches no device or
        the top has no room: `levels` then walks every operator."""
        bits_on, bit = self.bits_on, self.bit
        top, last = len(devices), len(devices) - 1
        below = 0
        for d in devices[:last]:
            below |= bits_on[d]
        reached, unit = self.plan(j)[4], self.plan(j)[6]
        on_top = reached & bits_on[devices[last]] & ~below
        cpu = [self.cpu[d] for d in devices]
        cap = [self.cap[d] + ROOM for d in devices]
        level: dict[int, int] = {}                  # the loop's; the others' last or 0
        cells: list[tuple[int, int, float]] = []    # (node, operator, load) booked below the top
        fresh: list[int] = []                       # the operators the loop put on the top
        upstream, fixed, candidates = self.t.upstream, self.fixed, self.bits
        for k in members(reached & ~on_top, len(bit)):
            start = 0
            for u in upstream[k]:
                p = level.get(u)
                if p is None:
                    p = last if on_top & bit[u] else 0
                if p > start:
                    start = p
            if placed and k in placed:
                p = -1
            elif below & bit[k]:                    # held below: the lowest there, or none
                p = next(p for p in range(last) if bits_on[devices[p]] & bit[k])
                p = p if p >= start else top
            elif start == last:
                p = last if candidates[k] >> devices[last] & 1 else top
            else:
                ok, p, load = candidates[k], start, rate * unit[k]
                while p < top and not (ok >> devices[p] & 1 and (
                        p == last or cpu[p] + load <= cap[p])):
                    p += 1
            if p == top:
                return False
            level[k] = p if p > 0 else 0
            if p == last:
                fresh.append(k)
            elif p >= 0:
                load = rate * unit[k]
                cells.append((devices[p], k, load))
                cpu[p] += load
                if cpu[p] > cap[p] and not fixed[k]:
                    return None
        return self.book_top(j, devices, (on_top, fresh, rate), cells, cpu)

    def book_top(self, j: int, devices: list[int], top: tuple,
                 cells: list[tuple[int, int, float]], cpu: list[float]) -> bool:
        """Book what `skim` found, unless the top has no room for it (False): each
        operator's load on its device (`pending` until a shift reads them), the instances
        new below the top (`cells`) and on it (`fresh`), and the devices' CPU (the top's
        summed here, in the operators' order, after the top's load before)."""
        on_top, fresh, rate = top
        node, bit = devices[-1], self.bit
        if len(fresh) > 32:
            mask = np.zeros(len(bit), dtype=bool)
            mask[fresh] = True
            on_top |= members_bits(mask)
        else:
            for k in fresh:
                on_top |= bit[k]
        ops, unit = self.on_top(j, node, on_top)
        loads = rate * unit
        total = cpu[-1]
        if len(ops):
            first = float(loads[0])
            loads[0] = first + total
            total = float(loads.cumsum()[-1])
            loads[0] = first
        if total > self.cap[node] + ROOM:
            return False
        cpu[-1] = total
        self.pending.append((node, ops, loads))
        self.bits_on[node] |= on_top
        if cells:
            self.pending.append(cells)
            for n, k, _ in cells:
                self.bits_on[n] |= bit[k]
        for p, d in enumerate(devices):
            self.cpu[d] = cpu[p]
        return True

    def on_top(self, j: int, node: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
        """The operators of `bits` (those of j's plan on the top `node` of a path) as an array,
        and their loads per unit of the flow's rate; the last such answer for (j, node) kept,
        as the next of j's flows under `node` mostly asks it again."""
        known = self.tops.get((j, node))
        if known is None or known[0] != bits:
            ops = members_array(bits, len(self.cost))
            known = self.tops[j, node] = (bits, ops, self.plan(j)[5][ops])
        return known[1], known[2]

    def levels(self, at: int, devices: list[int], plan: tuple, placed: set[int]) -> bool | None:
        """The path walked operator by operator (see the class's docstring), every one of
        them, booked at once: True when done (what it leaves, the operators no device takes,
        goes to `finish`, as in the device walk), None where a device holding an operator
        would overflow (nothing booked: the device walk does it)."""
        order, rows, loads = plan
        top = len(devices)
        cpu = [self.cpu[d] for d in devices]
        cap = [self.cap[d] + ROOM for d in devices]
        fixed, upstream, bits_on, bit = self.fixed, self.t.upstream, self.bits_on, self.bit
        level = [0] * len(self.cost)                # by operator: 0 for those not on the path
        found: list[int] = []                       # the device (position) of each
        later: list[int] = []
        bits = self.bits                            # bit e: a candidate on node e
        for k, load in zip(order, loads.tolist(), strict=True):
            start = 0
            for u in upstream[k]:
                if level[u] > start:
                    start = level[u]
            h = next((p for p, d in enumerate(devices) if bits_on[d] & bit[k]), -1)
            if placed and k in placed:
                p = -1
            elif h >= 0:
                p = h if h >= start else top
            else:
                ok, p = bits[k], start
                while p < top and not (ok >> devices[p] & 1 and cpu[p] + load <= cap[p]):
                    p += 1
            level[k] = p if p > 0 else 0
            found.append(p)
            if p == top:
                later.append(k)
            elif p >= 0:
                cpu[p] += load
                if cpu[p] > cap[p] and not fixed[k]:
                    return None
        cells = [(devices[p], k, load) for k, load, p in zip(
            order, loads.tolist(), found, strict=True) if 0 <= p < top]
        if cells:
            self.pending.append(cells)
        for node, k, _ in cells:
            bits_on[node] |= bit[k]
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
            holder = next((e for e in devices if self.holds(e, k)), -1)
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
                held = [e for e in devices if self.holds(e, k)]
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
                if k not in seen and self.holds(node, k) and not self.fixed[k]:
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
        ops, nodes = np.divmod(np.flatnonzero(self.held.T), len(t.names))  # by operator
        names = np.array(t.names, dtype=object)[nodes].tolist()
        ends = np.cumsum(np.bincount(ops, minlength=len(self.cost))).tolist()
        starts = [0, *ends[:-1]]
        keys = [op.name for op in t.problem.operators]
        notes, usual = self.notes, "the lowest node with room on each flow's path north"
        return Decision(
            dict(zip(keys, [tuple(names[a:b]) for a, b in zip(starts, ends, strict=True)],
                     strict=True)),
            dict(zip(keys, [PINNED if fixed else notes.get(k, usual)
                            for k, fixed in enumerate(self.fixed)], strict=True)))


def members_bits(mask: np.ndarray) -> int:
    """The int whose bit k is mask[k] (a bool row)."""
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")


def members_array(bits: int, width: int) -> np.ndarray:
    """The positions of the set bits of `bits` (below `width`), in order, as an array."""
    raw = np.frombuffer(bits.to_bytes((width + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little"))


def members(bits: int, width: int) -> list[int]:
    """The positions of the set bits of `bits`, in order: one at a time when they are few,
    else through members_array."""
    if bits.bit_count() > 32:
        return members_array(bits, width).tolist()
    found = []
    while bits:
        low = bits & -bits
        found.append(low.bit_length() - 1)
        bits ^= low
    return found


def candidate_bits(candidates: np.ndarray) -> list[int]:
    """Each operator's candidates as the bits of an int (bit e: node e), from the mask's rows
    packed 8 nodes a byte, little-endian."""
    packed = np.packbits(candidates, axis=1, bitorder="little")
    if packed.shape[1] <= 8:
        words = np.zeros((len(packed), 8), dtype=np.uint8)
        words[:, :packed.shape[1]] = packed
        return words.view("<u8")[:, 0].tolist()
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


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
