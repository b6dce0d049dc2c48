"""A randomized fault campaign with a checker (issue 54, item 3; docs/guarantees.md).

    python -m tests.chaos.run --seeds 20                 # 20 seeds on local.nodes4
    python -m tests.chaos.run --seed 17                  # replay one seed
    make chaos SEEDS=200

The parts, each a module of its own:
    schedule.py   Schedule.from_seed(seed, resource): the workload and the faults, drawn from
                  the seed (the same seed gives the same plan), printable
    workload.py   the units of a plan (mixed shapes, each writing a ground-truth log itself)
    client.py     the client process (python -m tests.chaos.client): submits the pilot and the
                  waves of named streams, obeys commands on stdin; killed and attached again
    inject.py     how each kind of fault is made (pids found in /proc and the pilot sandbox,
                  links cut in network namespaces, tmpfs filled, grown jobs ended)
    striking.py   the faults of a plan made at their times, and undone (SeedRun's part)
    checker.py    reads the store, the agents' start journals and the ground-truth log and
                  names every violated invariant
    cluster.py    the namespace SLURM (tests/slurm.sh, PILOT_SLURM_NETNS=1) for slurm-netns
    seed.py       one seed run: its clients (client_proc.py), its faults, its checks, bounded
    run.py        runs seeds one after another; the table, JSON results
    full_store_stream.py   a regression scenario (tests/test_chaos.py)
"""
