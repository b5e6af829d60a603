"""The host that runs the emulation: its doctor (doctor.py, `python -m emu.host`), its
containers' CPU and memory (metrics.py), where its CPU went (accounting.py), a run's own
fidelity (fidelity.py) and the model's calibration on it (calibrate.py, calibrate_plan.py,
calibrate_spark.py). What a plan needs of a host is emu.cluster.capacity's."""
