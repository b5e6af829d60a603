"""A cluster that is up: its agents and where operators run (agents.py), and a plan of jobs
carried out on it (apply.py: read from the agents, execute, verify)."""
