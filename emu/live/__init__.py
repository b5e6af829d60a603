"""A cluster that is up: its agents and where operators run (agents.py), one command to many
agents (control.py, on mqtt_loop.py's selector loop), and a plan of jobs carried out on it
(apply.py)."""
