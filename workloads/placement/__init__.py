"""Placement policies: where each operator's instances run, decided from numbers alone.

`problem` is the frozen question (operators with their rates, costs and sizes; candidate nodes
with their speed, cores, power and battery; the latency and bandwidth between them; pins), built
by experiments.placement from the model's costs; `policy` is the interface and its registry;
`policies` (with `edgeward`) and `optimal` are the shipped policies; `evaluate` scores any
answer with the one objective every policy is compared by; `tables` holds the problem as
numpy arrays for them all; `synthetic` makes seeded problems for the tests and benchmarks.
Neither backend is imported here.
"""
