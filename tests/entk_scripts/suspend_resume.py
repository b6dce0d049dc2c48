"""Pipeline.suspend() and resume() from post_exec callbacks, as EnTK's
misc/suspend_pipelines does: pipelines 'a' and 'b' of three stages each; a's tasks take 1 s,
b's first stage 2 s.  a's first stage suspends b (b's first stage is still running: it goes
on to its end, but b's second stage does not start); a's last stage resumes b, which goes on
with its second stage."""

import common

import pilot.entk as re

if __name__ == "__main__":
    a = common.pipeline(
        "a", [common.stage(s, [common.timed(f"a.{s}.t", 1)]) for s in ("s1", "s2", "s3")]
    )
    b_stages = [common.stage("s1", [common.timed("b.s1.t", 2)])]
    b_stages += [common.stage(s, [common.timed(f"b.{s}.t", 1)]) for s in ("s2", "s3")]
    b = common.pipeline("b", b_stages)
    seen = {}

    def suspend_b() -> None:
        b.suspend()
        seen["suspended"] = b.state

    def resume_b() -> None:
        seen["before_resume"] = [s.state for s in b.stages]
        b.resume()

    a.stages[0].post_exec = suspend_b
    a.stages[2].post_exec = resume_b

    amgr = re.AppManager()
    amgr.resource_desc = {"resource": "local.localhost", "walltime": 10, "cpus": 4}
    amgr.workflow = [a, b]
    amgr.outputs = ["$SHARED/times.txt"]
    amgr.run()
    amgr.terminate()
    common.summary([a, b], **seen)
