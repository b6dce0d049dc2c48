"""The bootstrap layer: the pilot job's first process (bootstrap.py) splits the pilot into
partitions, each running its own agent (its client link and agents' channel in client_link.py
and agent_channel.py).  Planning and sizing at submit (plan.py, sizing.py), the pilot's resources
and partition allocation (resources.py), the partition manager that enacts reconfig (manager.py,
control.py), node bring-up and liveness (node_set.py) through launch methods (launch/),
agent processes (agents/)."""
