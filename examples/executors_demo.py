"""The Python ecosystem's front doors on one pilot, and a reconfig under a running executor.

    python examples/executors_demo.py

1. A local pilot of 2 cores, one partition.  An rp.Executor runs calls on it (any partition).
2. A second executor names a partition of its own (a ComputePartitionDescription: started in
   the pilot for it, stopped at its shutdown); a Parsl config names the same partition by uid.
3. While the first executor's calls run, the pilot is reconfigured: its first partition is
   stopped and a new one started.  Queued calls go to the new partition, calls that were
   running there run again (the executor's rule, `reruns`): every call comes back, nothing is
   lost.  The output shows where each call ran.
"""

from __future__ import annotations

import collections
import os
import time

import pilot as rp


def where(i: int) -> tuple[int, str]:
    time.sleep(0.05)
    return i, os.environ["PILOT_PARTITION_ID"]


def main() -> None:
    pd = rp.ComputePilotDescription(
        resource="local.localhost", parts=[rp.ComputePartitionDescription(cores=1)], cores=2
    )
    with rp.Session() as session:
        pilot = rp.PilotManager(session).submit_pilots(pd)
        first = pilot.partitions[0]
        with rp.Executor(session=session, pilot=pilot) as ex:
            fs = [ex.submit(where, i) for i in range(60)]
            time.sleep(1.0)  # some run, the rest are queued in the first partition
            new = pilot.reconfig(stop=first.uid, start=[rp.ComputePartitionDescription(cores=1)])
            print(f"reconfig: stopped {first.uid}, started {new[0].uid} under the executor")
            results = [f.result(timeout=120) for f in fs]
            assert [i for i, _ in results] == list(range(60)), "a call was lost"
            ran = collections.Counter(part for _, part in results)
            print(f"all 60 calls came back; where they ran: {dict(ran)}")
            print(f"calls that ran again after the stop: {sum(f.runs > 1 for f in fs)}")

            # a second executor in a partition of its own, and Parsl in the same partition
            with rp.Executor(
                session=session, pilot=pilot, partition=rp.ComputePartitionDescription(cores=1)
            ) as mine:
                print("own partition:", mine.submit(where, 0).result(timeout=60)[1])
                parsl_demo(session, pilot, mine.partition.uid)


def parsl_demo(session, pilot, partition: str) -> None:
    try:
        import parsl
    except ImportError:
        print("(Parsl is not installed: pip install 'pilot-partitions[parsl]')")
        return
    from pilot.parsl import PilotExecutor

    @parsl.python_app
    def square(x):
        return x * x

    @parsl.bash_app
    def hello(stdout=None):
        return 'echo "hello from $PILOT_UNIT_ID in $PILOT_PARTITION_ID"'

    ex = PilotExecutor(label="pilot", session=session, pilot=pilot, partition=partition)
    with parsl.load(parsl.Config(executors=[ex], run_dir=os.path.join(session.dir, "parsl"))):
        print("parsl python apps:", [f.result() for f in [square(i) for i in range(5)]])
        out = os.path.join(session.dir, "hello.txt")
        hello(stdout=out).result()
        print("parsl bash app:", open(out).read().strip())


if __name__ == "__main__":
    main()
