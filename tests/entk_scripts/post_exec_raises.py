"""A post_exec that raises: run() ends with EnTKError, and nothing is left non-final: the task
running in the other pipeline, its stage and that pipeline end CANCELED, and so does the
pipeline whose post_exec raised (they stayed SUBMITTING, SCHEDULED and SCHEDULING)."""

import common

import pilot.entk as re


def boom() -> None:
    raise RuntimeError("boom in post_exec")


if __name__ == "__main__":
    first = common.stage("first", [common.timed("raising.first.t", 0.1)])
    first.post_exec = boom
    raising = common.pipeline("raising", [first, common.stage("next", [
        common.timed("raising.next.t", 0.1)])])  # fmt: skip
    beside = common.pipeline("beside", [common.stage("long", [common.timed("beside.long.t", 30)])])
    amgr = re.AppManager()
    amgr.resource_desc = {"resource": "local.localhost", "walltime": 10, "cpus": 2}
    amgr.workflow = [raising, beside]
    try:
        amgr.run()
        error = None
    except re.EnTKError as exc:
        error = f"{type(exc).__name__}: {exc}"
    common.summary([raising, beside], error=error, sid_after=amgr.sid)
