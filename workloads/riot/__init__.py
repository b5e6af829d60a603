"""RIoTBench streams and tasks as pure-Python operators (standard library and numpy only).

- senml: the Reading and its wire forms (SenML, CSV, plain JSON)
- datasets: seeded CITY and TAXI stream generators and sample CSV files
- replay: a CSV file as (virtual emit time, reading) pairs
- sketches: Bloom filter and HyperLogLog
- models: offline training of the decision tree and linear regression models (JSON)
- tasks: the operators (tasks.base: Task, TASKS registry, make_task; one module per family)
"""
