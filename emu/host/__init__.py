"""The host that runs the emulation: its doctor (doctor.py, `python -m emu.host`), its
containers' CPU and memory (metrics.py), where its CPU went (accounting.py), a run's own
fidelity (fidelity.py), the capacity planner (capacity.py) and the model's calibration on it
(calibrate.py)."""
