"""The plain Docker engine (`run.engine: docker`): a cluster plan as containers on this host's
Docker Engine (engine.py), its inventory by labels (inventory.py, `foglab emu down`'s
removal), the gateways' agents forked from one warm interpreter (zygote.py), one node's
container as the code around the engine acts on it (nodes.py), and a fault thread for the
tests and benchmarks (faults.py)."""
