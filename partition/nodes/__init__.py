"""The bootstrap's side of the node daemons: bounded bring-up, liveness and ordered halt
(node_set.py), the pulse channel (pulse.py), nodes of a later batch job joining
(joins.py), and what such a job runs (join_job.py: `python -m pilot.partition.nodes.join_job`)."""
