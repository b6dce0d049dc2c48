"""Adaptivity as EnTK users write it: a stage's post_exec looks at what its tasks made and adds
to the workflow.  Pipeline 'adapt' starts with two stages:

    count    one task writes 3 into n.txt in its sandbox
    work     one task; count's post_exec reads n.txt (task.path) and adds 3 more tasks here
             before it starts
and work's post_exec appends stages 'more 1', 'more 2', each of one task, the first one's
post_exec adding the second (a pipeline grows while it runs).  Every task records its times
(common.timed)."""

import os

import common

import pilot.entk as re

if __name__ == "__main__":
    counter = re.Task()
    counter.name = "counter"
    counter.executable = "/bin/sh"
    counter.arguments = ["-c", "echo 3 > n.txt"]
    count = common.stage("count", [counter])
    work = common.stage("work", [common.timed("adapt.work.w0", 1)])
    pipe = common.pipeline("adapt", [count, work])
    seen = {}

    def add_work() -> None:
        with open(os.path.join(counter.path, "n.txt")) as f:
            n = int(f.read())
        seen["n"] = n
        work.add_tasks([common.timed(f"adapt.work.w{i}", 1) for i in range(1, n + 1)])

    def add_more_2() -> None:
        pipe.add_stages(common.stage("more 2", [common.timed("adapt.more 2.m", 1)]))

    def add_more_1() -> None:
        more = common.stage("more 1", [common.timed("adapt.more 1.m", 1)])
        more.post_exec = add_more_2
        pipe.add_stages(more)

    count.post_exec = add_work
    work.post_exec = add_more_1

    amgr = re.AppManager()
    amgr.resource_desc = {"resource": "local.localhost", "walltime": 10, "cpus": 4}
    amgr.workflow = [pipe]
    amgr.outputs = ["$SHARED/times.txt"]
    amgr.run()
    amgr.terminate()
    common.summary([pipe], n=seen.get("n"))
