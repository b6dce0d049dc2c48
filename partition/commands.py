"""The commands a pilot obeys, from its client (`cmd` on the pilot link) or from the `pilot` CLI
(the control socket), one function per op, in one table.

    {cid, op, args} -> {cid, ok: true, result} | {cid, ok: false, error}

    op             args                            result
    reconfig       {stop, start: [desc], uids}     {stopped: [uids], started: [{uid, state,
                                                    reason}]}; a repeated cid answers again
                                                    and does nothing (partition/manager.py)
    cancel_units   {units: [[uid, part]], reason}  {}: each partition's agent cancels its units
    stop_parts     {uids, reason}                  {}: queued units handed back, running ones
                                                    CANCELED
    cancel_pilot   {reason}                        {}: the pilot tears down, CANCELED
    partitions     {}                              {pilot, size, free, partitions: [...]}
    attach         {client: endpoint}              {pilot, partitions}: a new client process
                                                    takes over the pilot link; hello and every
                                                    partition's state are sent to it again
    sync           {units: {part: [uids]}}         {asked: [parts]}: their agents say again
                                                    what they know, then `synced` per partition
A command that fails answers ok: false with the error; it never stops the bootstrap.
"""

from __future__ import annotations

import logging
import time

import zmq

from pilot.protocol import msg, pack
from pilot.states import CANCELED, FINAL

log = logging.getLogger("bootstrap")


def reconfig(boot, cid, args: dict) -> dict:
    return boot.pm.reconfig(
        cid or f"anon.{time.time()}", args.get("stop"), args.get("start") or [], args.get("uids")
    )


def cancel_units(boot, cid, args: dict) -> dict:
    by_part: dict[str, list] = {}
    for uid, part in args["units"]:
        by_part.setdefault(part, []).append(uid)
    reason = args.get("reason", "canceled")
    for part, uids in by_part.items():
        boot.send_agent(part, [b"cancel", pack({"uids": uids, "reason": reason})])
    return {}


def stop_parts(boot, cid, args: dict) -> dict:
    for uid in args["uids"]:
        boot.pm.stop(uid, CANCELED, args.get("reason", "canceled"), hand_back=True)
    return {}


def cancel_pilot(boot, cid, args: dict) -> dict:
    boot.end(CANCELED, args.get("reason") or "canceled")
    return {}


def partitions(boot, cid, args: dict) -> dict:
    return {
        "pilot": boot.uid,
        "size": boot.cfg["size"],
        "free": boot.pool.free,
        "partitions": boot.pm.describe(),
    }


def attach(boot, cid, args: dict) -> dict:
    """A new client process takes over: point the pilot link at it, say hello, and send
    every partition's current state again (units are reconciled by `sync`)."""
    endpoint = args["client"]
    old = boot.cfg["client"]
    if endpoint != old:
        try:
            boot.client.disconnect(old)
        except zmq.ZMQError:
            pass
        boot.client.connect(endpoint)
        boot.cfg["client"] = endpoint
    boot.last_heard = time.monotonic()
    log.info(
        "attach: client now %s (was %s; %d messages dropped meanwhile)",
        endpoint,
        old,
        boot.dropped,
    )
    boot.hello(attach=True)
    for part in boot.pm.parts.values():
        info = {"resources": part.alloc.to_dict(boot.pool)} if part.alloc else {}
        info["description"] = part.desc.to_dict()
        if part.reason:
            info["reason"] = part.reason
        boot.emit(part.uid, part.state, info)
    boot.flush()
    return {"pilot": boot.uid, "partitions": len(boot.pm.parts)}


def sync(boot, cid, args: dict) -> dict:
    """Ask each partition's agent for the current state of these units.  Agents answer with
    state updates and a `synced` message naming the uids they do not know; a partition
    without an agent knows none of them."""
    waiting = []
    for part_uid, uids in args["units"].items():
        part = boot.pm.parts.get(part_uid)
        if part is not None and part.state not in FINAL and part.uid in boot.procs:
            boot.send_agent(part_uid, [b"sync", pack({"cid": cid, "uids": uids})])
            waiting.append(part_uid)
        else:
            boot.to_client(msg(b"synced", {"cid": cid, "part": part_uid, "unknown": uids}))
    return {"asked": waiting}


OPS = {
    "reconfig": reconfig,
    "cancel_units": cancel_units,
    "stop_parts": stop_parts,
    "cancel_pilot": cancel_pilot,
    "partitions": partitions,
    "attach": attach,
    "sync": sync,
}


def run(boot, body: dict) -> dict:
    """Run one command; the reply never raises."""
    cid, op, args = body.get("cid"), body.get("op"), body.get("args") or {}
    try:
        if op not in OPS:
            raise ValueError(f"op={op!r} is unknown; accepted: {', '.join(OPS)}")
        return {"cid": cid, "ok": True, "result": OPS[op](boot, cid, args)}
    except (ValueError, KeyError, TypeError) as exc:
        return {"cid": cid, "ok": False, "error": str(exc)}
