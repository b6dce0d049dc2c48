"""What runs on the nodes: one agent process per partition that places units on the
partition's slots and runs them (agent.py with reports.py and stopping.py, pool.py,
scheduler.py, runners/), what a unit's rank sees and how it starts (rank_env.py, spawn.py,
unit_command.py, the C extension in _spawn-src/), the node daemon of multi-node pilots
(node/), the function workers (workers/), and the zygote agents are forked from (zygote.py,
with the fork-server loop it shares with node/zygote.py: fork_server.py)."""
