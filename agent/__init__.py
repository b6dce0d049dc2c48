"""What runs on the nodes: one agent process per partition that places units on the
partition's slots and runs them (agent.py, pool.py, scheduler.py, runners/), the node daemon
of multi-node pilots (node_daemon.py), and the zygote agents are forked from (zygote.py)."""
