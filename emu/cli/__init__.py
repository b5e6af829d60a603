"""The command line of the emulation: `foglab emu` (main.py) and its commands with a module
each (apply_command.py, calibrate_command.py), and how a command reaches a cluster
(clusters.py)."""
