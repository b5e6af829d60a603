"""Mobility of users carrying devices: movement models, traces, radio links and handover."""

from sim.mobility.handover import Handover
from sim.mobility.movement import (
    Area,
    ManhattanGrid,
    Movement,
    RandomWaypoint,
    TraceReplay,
    build_movement,
)
from sim.mobility.radio import RadioModel
from sim.mobility.traces import Track, load_trace
from workloads.mobility import (
    HandoverSpec,
    ManhattanSpec,
    MobilitySpec,
    MovementSpec,
    RadioSpec,
    RandomWaypointSpec,
    TraceSpec,
)

__all__ = [
    "Area", "Handover", "HandoverSpec", "ManhattanGrid", "ManhattanSpec", "MobilitySpec",
    "Movement", "MovementSpec", "RadioModel", "RadioSpec", "RandomWaypoint", "RandomWaypointSpec",
    "TraceReplay", "TraceSpec", "Track", "build_movement", "load_trace",
]
