"""The bootstrap's side of its agents: the agent channel (channel.py: what agents send, and
what is sent to them), and agent processes by how they are started (the `AgentProcess`
interface is in partition/manager.py, which uses them):

    forked   forked by the agent zygote next to the bootstrap (a few ms each)
    hosted   started by the node daemon of a node of its own (agent_overhead.nodes)
"""
