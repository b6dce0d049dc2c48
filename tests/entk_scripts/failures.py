"""Failed tasks, as EnTK reports them.  First AppManager(resubmit_failed=True, reattempts=3):
task 'flaky' fails its first two runs (a count of runs kept in $SHARED) and ends DONE on the
third.  Then a pipeline whose task 'fatal' (error_is_fatal) exits 5: its stage and pipeline
end FAILED and run() raises EnTKError; a second pipeline, running beside it, is not left
running (run() terminated)."""

import common

import pilot.entk as re

if __name__ == "__main__":
    flaky = re.Task()
    flaky.name = "flaky"
    flaky.pre_exec = ["echo run >> $RP_PILOT_SANDBOX/runs.txt"]
    flaky.executable = "/bin/sh"
    flaky.arguments = ["-c", "test $(wc -l < $RP_PILOT_SANDBOX/runs.txt) -ge 3"]
    retried = common.pipeline("retried", [common.stage("only", [flaky])])
    amgr = re.AppManager(resubmit_failed=True, reattempts=3)
    amgr.resource_desc = {"resource": "local.localhost", "walltime": 10, "cpus": 2}
    amgr.workflow = [retried]
    amgr.outputs = ["$SHARED/runs.txt"]
    amgr.run()
    amgr.terminate()

    fatal = re.Task()
    fatal.name = "fatal"
    fatal.executable = "/bin/sh"
    fatal.arguments = ["-c", "exit 5"]
    fatal.error_is_fatal = True
    failing = common.pipeline("failing", [common.stage("s1", [fatal]), common.stage("s2", [
        common.timed("failing.s2.never", 0.1)])])  # fmt: skip
    beside = common.pipeline("beside", [common.stage("long", [common.timed("beside.long.t", 30)])])
    amgr = re.AppManager()
    amgr.resource_desc = {"resource": "local.localhost", "walltime": 10, "cpus": 2}
    amgr.workflow = [failing, beside]
    try:
        amgr.run()
        error = None
    except re.EnTKError as exc:
        error = f"{type(exc).__name__}: {exc}"
    common.summary([retried, failing, beside], error=error, sid_after=amgr.sid)
