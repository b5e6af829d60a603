"""Link shaping for the emulation: kernel netem where the kernel has it, else a user-space relay."""

from emu.links.netem import NetemShaper, netns_of_pid
from emu.links.probe import NetemProbe, ShaperChoice, choose_shaper, probe_netem
from emu.links.relay import LinkRelay, LinkRelayThread, RelayCounters
from emu.links.spec import LinkShape

__all__ = [
    "LinkRelay",
    "LinkRelayThread",
    "LinkShape",
    "NetemProbe",
    "NetemShaper",
    "RelayCounters",
    "ShaperChoice",
    "choose_shaper",
    "netns_of_pid",
    "probe_netem",
]
