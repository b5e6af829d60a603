"""The MQTT login of a Spark job's clients on a closed cluster (emu.cluster.access): its node's,
which the agent that starts the job hands down in the environment (emu.agent.mqtt
LOGIN_VARIABLE, the same name); none on an open broker or outside the emulation."""

from __future__ import annotations

import os

LOGIN_VARIABLE = "FOGLAB_MQTT_LOGIN"  # "user:password"


def login(client):
    """Log `client` (paho) in as the environment says, if it says; the client, for chaining."""
    value = os.environ.get(LOGIN_VARIABLE)
    if value:
        user, _, password = value.partition(":")
        client.username_pw_set(user, password)
    return client
