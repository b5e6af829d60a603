"""The host's side of talking to the agents: one command to many agents at once, their
replies and their registration (commands.py), on a selector loop that holds thousands of MQTT
clients (mqtt_loop.py)."""
