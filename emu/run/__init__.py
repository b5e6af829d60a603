"""An emulated run: what each agent runs (deployment.py), the run itself (emulate.py), what is
watched while it runs (health.py, records_watch.py, spark_jobs.py) and its records read back
as the model's tables (tables.py)."""
