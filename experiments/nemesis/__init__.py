"""A Jepsen-style nemesis for the emulation: promise-bearing scenarios under seeded random
fault schedules, each run checked against its promise (docs/nemesis.md)."""
