"""The node daemon: one process per node of a multi-node pilot, which starts and watches the
ranks its node's agents send it (daemon.py: the protocol; dispatch.py: what it does with each
message; ranks.py: its running ranks and their events), the zygote daemons are forked from
(zygote.py), and the host that runs many simulated daemons in one process (sim.py, resource
`local.sim`)."""
