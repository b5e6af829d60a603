"""What an engine brings up, engine-neutral: the cluster plan (plan.py), what each agent runs
(deployment.py), its links (links.py, relays.py), its access (access.py, grants.py,
rabbitmq_access.py, tls.py), the services' readiness (services.py) and holding a cluster up
(hold.py). The engines that run a plan are emu.engines'."""
