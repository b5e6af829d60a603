"""Moving an operator instance on a running cluster, each kind of operator its own way:
dispatch.py chooses the mover by the operator's engine (workloads.operator_engines: moves_by);
by_agents.py moves an instance the agents run, spark_query.py a Spark query."""
