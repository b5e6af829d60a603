"""Shape a link with a kernel netem qdisc on an interface in a network namespace, via pyroute2.

netem shapes what leaves an interface: to shape both directions of a link, shape the interface
at each end (for a container, its end of the veth pair, in its namespace ``/proc/<pid>/ns/net``).

Differences from the relay (``emu.links.relay``) that results may show:
- Jitter is uniform in latency +- jitter_s: pyroute2 sends no delay distribution table, and the
  kernel draws uniformly without one. With jitter and no rate, netem may reorder packets; TCP
  puts them back in order, at some cost.
- Loss drops real packets; TCP recovers by fast retransmit or timeout, as it would.
- The rate counts whole frames, headers included, and is limited to 2**32 - 1 bytes/s (~34 Gbit/s).
- At a time dilation K the caller installs ``shape.dilated(K)`` (emu.cluster.links): delays and
  rates are then right in emulated time, but a dropped packet costs the kernel's retransmission
  timeout, which is not dilated (1/K of it in emulated time); the relay dilates its stall.

pyroute2 (>=0.9.1, for ``AsyncIPRoute(netns=...)``) is imported lazily: code that only chooses a
shaper does not need it.
"""

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Self, TypeVar

from emu.links.spec import LinkShape

if TYPE_CHECKING:
    from pyroute2 import AsyncIPRoute
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

MAX_RATE_BYTES_S = 2**32 - 1

T = TypeVar("T")


def netns_of_pid(pid: int) -> str:
    """The network namespace of a process, e.g. a container's init, as a path pyroute2 opens."""
    return f"/proc/{pid}/ns/net"


def netem_parameters(shape: LinkShape) -> dict[str, float]:
    """The shape in the units of pyroute2's netem options: microseconds, percent, bytes/s."""
    rate = 0 if shape.bandwidth_bps is None else int(shape.bandwidth_bps // 8)
    if rate > MAX_RATE_BYTES_S:
        raise ValueError(f"netem rate is at most {MAX_RATE_BYTES_S} bytes/s, got {rate}")
    return {
        "delay": round(shape.latency_s * 1e6),
        "jitter": round(shape.jitter_s * 1e6),
        "loss": shape.loss * 100,
        # Always sent: the kernel keeps the previous rate when a change omits it; 0 is no limit.
        "rate": rate,
    }


def netem_message(index: int, shape: LinkShape) -> "tcmsg":
    """A root netem qdisc request for interface ``index``, carrying all of ``shape``."""
    from pyroute2.netlink.rtnl.tcmsg import sched_netem

    options = sched_netem.get_parameters(netem_parameters(shape))
    return _root_qdisc_message(index, 0, [("TCA_KIND", "netem"), ("TCA_OPTIONS", options)])


def _root_qdisc_message(index: int, handle: int, attrs: list[tuple[str, Any]]) -> "tcmsg":
    from pyroute2.netlink.rtnl import TC_H_ROOT
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    message = tcmsg()
    message["index"] = index
    message["handle"] = handle
    message["parent"] = TC_H_ROOT
    message["attrs"] = attrs
    return message


class NetemShaper:
    """Apply, change and clear a root netem qdisc on one interface of one network namespace.

    Synchronous, like the emulation code that calls it: it drives pyroute2's asyncio API on an
    event loop of its own, so it must not be used from a thread that runs an event loop.
    """

    def __init__(self, ifname: str, netns: str | None = None) -> None:
        """``netns``: a name under /var/run/netns, a path such as ``netns_of_pid(pid)``, or
        None for this process's namespace. It must exist: the shaper never creates one."""
        self.ifname = ifname
        self.netns = netns
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ipr: AsyncIPRoute | None = None
        self._index = 0

    def open(self) -> Self:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._connect())
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._loop is None:
            return
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None
            # One more turn of the loop lets the netlink transport finish closing.
            self._loop.run_until_complete(asyncio.sleep(0))
        self._loop.close()
        self._loop = None

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def apply(self, shape: LinkShape) -> None:
        """Make netem with this shape the root qdisc: replaces another root qdisc, changes netem."""
        from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST
        from pyroute2.netlink.rtnl import RTM_NEWQDISC

        flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
        self._run(self._request(netem_message(self._index, shape), RTM_NEWQDISC, flags))

    def change(self, shape: LinkShape) -> None:
        """Change the shape of the netem root qdisc in place; fails when there is none."""
        from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
        from pyroute2.netlink.rtnl import RTM_NEWQDISC

        message = netem_message(self._index, shape)
        self._run(self._request(message, RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK))

    def clear(self) -> bool:
        """Remove the root qdisc if it is netem (back to the kernel default); say if it was."""
        from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
        from pyroute2.netlink.rtnl import RTM_DELQDISC

        current = self.current()
        if current is None:
            return False
        # Naming the kind makes the kernel refuse if another qdisc took netem's place meanwhile.
        message = _root_qdisc_message(self._index, current["handle"], [("TCA_KIND", "netem")])
        self._run(self._request(message, RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK))
        return True

    def current(self) -> "tcmsg | None":
        """The netem root qdisc as the kernel reports it, or None."""
        return self._run(self._current_netem())

    async def _connect(self) -> None:
        from pyroute2 import AsyncIPRoute

        # flags=0: pyroute2 would otherwise create a missing namespace, hiding a wrong name.
        self._ipr = AsyncIPRoute(netns=self.netns, flags=0)
        indices = await self._ipr.link_lookup(ifname=self.ifname)
        if not indices:
            raise LookupError(f"no interface {self.ifname!r} in netns {self.netns!r}")
        self._index = indices[0]

    async def _request(self, message: "tcmsg", kind: int, flags: int) -> None:
        # Built here rather than through ipr.tc("add", "netem", rate=...): pyroute2 0.9.7 also
        # sends that rate as a stray TCA_RATE estimator attribute, which the kernel rejects.
        assert self._ipr is not None
        async for _ in await self._ipr.nlm_request(message, msg_type=kind, msg_flags=flags):
            pass  # reading the answer is what raises the kernel's error, if any

    async def _current_netem(self) -> "tcmsg | None":
        from pyroute2.netlink.rtnl import TC_H_ROOT

        assert self._ipr is not None
        async for qdisc in await self._ipr.get_qdiscs(index=self._index):
            if qdisc["parent"] == TC_H_ROOT and qdisc.get_attr("TCA_KIND") == "netem":
                return qdisc
        return None

    def _run(self, coroutine: Coroutine[object, object, T]) -> T:
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("the shaper is not open: use open() or a with block")
        return self._loop.run_until_complete(coroutine)
