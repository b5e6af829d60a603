"""The hybrid backend: a real-time SimPy model drives the emulation.

It sits above both backends (sim and emu never import each other): emu gives the actions
(a device's access link, a device's handover between gateways' agents, an operator's
migration), sim gives the processes (movement, radio, handover: sim.mobile; the migration
policy: sim.policy), and the modules here wire one to the other, each with one job:

- realtime: the model's clock (simpy.rt, not strict) on a thread of its own, and its lag;
- actions: the emulation's actions, carried out in order off the model's thread;
- links: each moving user's radio (latency, bandwidth, loss at its distance) applied to its
  emulated access link as it moves;
- handover: a user handed to another gateway has its driver leave the old gateway's agent
  and join the new one's, with its readings and emission times unchanged;
- load: the devices of `scenario.load`, not emulated: a generator on the host publishes their
  readings into their gateways on the gateway agents' own driver schedule;
- backend: one run, composed, recorded in the common tables plus `handovers`.
"""
