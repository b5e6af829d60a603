"""Each message reaches each operator that reads it once: at the gateway where it was
published, and through the broker for the operators elsewhere, never both."""

from __future__ import annotations

import pandas as pd
from foundation.helpers import run

BOTH = """
name: both
topology:
  name: t
  nodes:
    - {name: s, kind: device, replicas: 2}
    - {name: gw, kind: gateway, replicas: 2}
    - {name: broker, kind: broker}
    - {name: cloud, kind: cloud_vm}
  links:
    - {from: s-1, to: gw-1, latency: 2ms}
    - {from: s-2, to: gw-2, latency: 2ms}
    - {from: gw-*, to: broker, latency: 5ms}
    - {from: broker, to: cloud, latency: 5ms}
workload:
  name: w
  streams: [{name: city, sources: s-*, rate: 2/s, arrivals: periodic, qos: QOS}]
pipeline:
  - {name: local, on: gateways, reads: city}
  - {name: far, on: cloud, reads: city}
run: {duration: 10s}
"""


def test_an_operator_on_the_gateway_does_not_get_its_input_again_through_the_broker():
    for qos in (0, 1):
        messages = pd.DataFrame(run(BOTH.replace("QOS", str(qos))).tables["messages"])
        assert not messages.duplicated(["id", "sink"]).any()
        per_sink = messages.groupby("sink", observed=True).size().to_dict()
        assert per_sink == {"gw-1": 20, "gw-2": 20, "cloud": 40}
        # The gateway's copy is read where it was published: one hop, the device's.
        assert (messages.loc[messages["sink"] != "cloud", "hops"] == 1).all()
