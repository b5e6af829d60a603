"""The emulation on a Docker Swarm: the same cluster plan as Swarm services (docs/swarm.md)."""
