"""The bootstrap layer: the pilot job's first process (bootstrap.py) splits the pilot into
partitions, each running its own agent.  Its links: to the client (client/), to its agents
(agents/), to its nodes' daemons (nodes/).  Planning and sizing at submit (plan.py, sizing.py:
the client calls them, no process), the pilot's resources and partition allocation
(resources.py), the partition manager that enacts reconfig (manager.py) and the commands a
pilot obeys (control.py), a pilot that grows by later batch jobs (growth.py), launch methods
(launch/), unit processes whose owner died (orphans.py), file-system work off the loop
(off_loop.py)."""
