"""Hardware profiles: a node's architecture, cores, clock, memory and relative speed."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from topologies.fields import Frequency, Size

NodeKind = Literal["device", "gateway", "broker", "cloud_vm", "coordinator", "switch"]


class Profile(BaseModel):
    """A hardware profile; `speed` is one core's speed relative to one reference cloud vCPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arch: Literal["arm64", "amd64", "mcu", "none"]
    cores: int = Field(ge=1, le=1024)
    clock: Frequency
    memory: Size
    speed: float = Field(gt=0, le=100)
    # What the operating system and the node's own daemons take before any operator runs.
    base_memory: Size = 0


GiB = 1024**3
MiB = 1024**2

# Speeds are relative single-core figures: a Pi 3B core at 1.2 GHz does about a quarter of
# a 2020s cloud vCPU's work on interpreted stream tasks, a Pi 4 core a little under half.
BUILTIN_PROFILES: dict[str, Profile] = {
    "sensor": Profile(arch="mcu", cores=1, clock=240e6, memory=520 * 1024, speed=0.02),
    "rpi3b": Profile(arch="arm64", cores=4, clock=1.2e9, memory=1 * GiB, speed=0.25,
                     base_memory=180 * MiB),
    "rpi4": Profile(arch="arm64", cores=4, clock=1.5e9, memory=4 * GiB, speed=0.45,
                    base_memory=200 * MiB),
    "vm.small": Profile(arch="amd64", cores=1, clock=2.4e9, memory=2 * GiB, speed=1.0,
                        base_memory=300 * MiB),
    "vm.medium": Profile(arch="amd64", cores=2, clock=2.4e9, memory=4 * GiB, speed=1.0,
                         base_memory=300 * MiB),
    "vm.large": Profile(arch="amd64", cores=4, clock=2.4e9, memory=8 * GiB, speed=1.0,
                        base_memory=400 * MiB),
    "vm.xlarge": Profile(arch="amd64", cores=8, clock=2.4e9, memory=16 * GiB, speed=1.0,
                         base_memory=500 * MiB),
    "switch": Profile(arch="none", cores=1, clock=1e9, memory=0, speed=1.0),
}

DEFAULT_PROFILE: dict[str, str] = {
    "device": "sensor",
    "gateway": "rpi4",
    "broker": "vm.medium",
    "cloud_vm": "vm.medium",
    "coordinator": "vm.small",
    "switch": "switch",
}
