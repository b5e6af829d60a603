"""An emulated run: the run itself (emulate.py), what is watched while it runs (health.py,
records_watch.py, spark_jobs.py) and its records read back as the model's tables (tables.py).
What each agent runs is the cluster plan's (emu.cluster.deployment)."""
