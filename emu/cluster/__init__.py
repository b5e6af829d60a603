"""What an engine brings up, engine-neutral: the cluster plan (plan.py; what it refuses,
plan_checks.py; its links' routes and shapes, plan_links.py; its ZooKeeper servers,
zookeeper_servers.py; closed and with TLS, closing.py; names.py), what each agent runs
(deployment.py), what the plan needs of hosts (capacity.py), the broker kinds' side on the
containers (broker_kinds.py), its links (links.py, relays.py), its access (access.py,
grants.py, rabbitmq_access.py, tls.py), the services' readiness (services.py) and holding a
cluster up (hold.py). The engines that run a plan are emu.engines'."""
