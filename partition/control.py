"""The commands a pilot obeys, from its client (`cmd` on the pilot link) or from the `pilot` CLI
(the control socket), one function per op, in one table.

    {cid, op, args} -> {cid, ok: true, result} | {cid, ok: false, error}

    op             args                            result
    reconfig       {stop, start: [desc], uids,     {stopped: [uids], started: [{uid, state,
                    reason}
                                                    reason}]}; a repeated cid answers again
                                                    and does nothing (partition/manager.py)
    cancel_units   {units: [[uid, part]], reason}  {}: each partition's agent cancels its units
    give_back      {part, uids}                    {asked}: the partition's agent hands back
                                                    those still queued, not started (`back`,
                                                    stays); the client routes them again
    stop_parts     {uids, reason}                  {}: queued units handed back, running ones
                                                    CANCELED
    cancel_pilot   {reason}                        {}: the pilot tears down, CANCELED
    partitions     {}                              {pilot, size, free, partitions: [...],
                                                    jobs: [...] (partition/growth.py)}
    nodes          {}                              {pilot, nodes: [[index, name, state,
                                                    cores, gpus, busy cores, busy gpus,
                                                    ranks, partition], ...]}
    attach         {client: endpoint, owner,       {pilot, partitions}: a new client process
                    epoch, take_over, data}         takes over the pilot link; hello and every
                                                    partition's state are sent to it again; an
                                                    epoch older than the owner's is refused;
                                                    `data`, its data directory, goes to the
                                                    agents when it is not the pilot's (`data`)
    sync           {units: {part: [uids]}}         {asked: [parts]}: their agents say again
                                                    what they know, then `synced` per partition
                                                    (ahead of it, `back` for units that
                                                    partition handed back: outbox.py); a
                                                    partition without an agent names the
                                                    units its start journal has (`started`),
                                                    and says `back` for the others, but for
                                                    those it holds until its agent is up
Every field is checked before anything is done (pilot/wire/checks.py: types, sizes, uid format);
a command that fails answers ok: false with the error naming the field; no input stops the
bootstrap.

Each op is given the bootstrap (partition/bootstrap.py), not copies of its parts: the partition
manager and the resources are made again once the nodes are up (`make_resources`), and a copy
kept here would be the one before.  What the ops reach of it, and nothing else: `uid`, `cfg`,
`pm` (the partitions), `resources` (the nodes), `growth` (its batch jobs), `agents` (their
channel: send_agent, procs, node_load), `link` (the client: last_heard, dropped, find_client,
release_owner, point_at, hello, flush, to_client), `outbox` (kept outcomes), `emit` (a
partition's state to the client), `end` (the pilot's end) and `internal` (our own bugs, said).
"""

from __future__ import annotations

import logging
import time

from pilot import validate
from pilot.ids import ALL
from pilot.states import CANCELED, FINAL
from pilot.wire import checks, peer_version, updates
from pilot.wire.journal import journal_path
from pilot.wire.protocol import HEARTBEAT, ProtocolError, msg, pack, unpack

log = logging.getLogger("bootstrap")


START_MAX = 64  # partitions one reconfig may start


RECONFIG_ARGS = ("stop", "start", "uids", "reason")


def reconfig(boot, cid, args: dict) -> dict:
    unknown = sorted(set(args) - set(RECONFIG_ARGS))
    if unknown:
        raise ValueError(f"args.{unknown[0]}: not a reconfig argument (accepted: {RECONFIG_ARGS})")
    if args.get("stop") is None and not args.get("start"):
        raise ValueError("args: a reconfig gives stop (uids or 'ALL') and/or start (sizes)")
    stop = args.get("stop")
    if stop is not None and stop != ALL:
        stop = [stop] if isinstance(stop, str) else stop
        checks.uids("args.stop", stop, START_MAX * 16)
    start = validate.items("args.start", args.get("start") or [], START_MAX)
    for i, d in enumerate(start):
        validate.mapping(f"args.start[{i}]", d)
    uids = args.get("uids")
    if uids is not None:
        checks.uids("args.uids", uids, len(start))
    reason = validate.text("args.reason", args.get("reason"))
    return boot.pm.reconfig(cid or f"anon.{time.time()}", stop, start, uids, reason)


def cancel_units(boot, cid, args: dict) -> dict:
    by_part: dict[str, list] = {}
    for i, pair in enumerate(validate.items("args.units", args.get("units"))):
        if not isinstance(pair, list) or len(pair) != 2:
            raise validate.bad(f"args.units[{i}]", pair, "a pair [unit uid, partition uid]")
        uid = checks.uid(f"args.units[{i}][0]", pair[0])
        part = checks.uid(f"args.units[{i}][1]", pair[1])
        by_part.setdefault(part, []).append(uid)
    reason = validate.text("args.reason", args.get("reason")) or "canceled"
    for part, uids in by_part.items():
        if part in boot.pm.parts:
            boot.agents.send_agent(part, [b"cancel", pack({"uids": uids, "reason": reason})])
    return {}


def give_back(boot, cid, args: dict) -> dict:
    part = checks.uid("args.part", args.get("part"))
    uids = checks.uids("args.uids", args.get("uids"))
    p = boot.pm.parts.get(part)
    if p is None or p.state in FINAL or part not in boot.agents.procs:
        return {"asked": False}  # (gone, or going: its stop hands back what is queued)
    boot.agents.send_agent(part, [b"give_back", pack({"uids": uids})])
    return {"asked": True}


def stop_parts(boot, cid, args: dict) -> dict:
    uids = checks.uids("args.uids", args.get("uids"))
    unknown = [u for u in uids if u not in boot.pm.parts]
    if unknown:
        raise ValueError(f"args.uids: no such partition(s) {unknown[:5]} in {boot.uid}")
    reason = validate.text("args.reason", args.get("reason")) or "canceled"
    for uid in uids:
        boot.pm.stop(uid, CANCELED, reason, hand_back=True)
    return {}


def cancel_pilot(boot, cid, args: dict) -> dict:
    boot.end(CANCELED, validate.text("args.reason", args.get("reason")) or "canceled")
    return {}


def partitions(boot, cid, args: dict) -> dict:
    return {
        "pilot": boot.uid,
        "size": boot.cfg["size"],
        "free": boot.resources.free,
        "partitions": boot.pm.describe(),
        "jobs": boot.growth.describe(),
    }


def nodes(boot, cid, args: dict) -> dict:
    """Each node of the pilot, one row: [index, name, state (up, down, released), cores,
    GPUs, busy cores, busy GPUs, ranks, partition] (busy: what its partition's agent last
    said, agent/agent.py `load`; partition: the uid of the one that holds it, or None)."""
    load = boot.agents.node_load
    rows = []
    for n in boot.resources.nodes:
        state = "released" if n.released else "down" if n.down else "up"
        busy = load.get(n.index, (0, 0, 0, None))
        rows.append([n.index, n.name, state, len(n.cores), len(n.gpus), *busy])
    return {"pilot": boot.uid, "nodes": rows}


def attach(boot, cid, args: dict) -> dict:
    """A new client process takes over: point the pilot link at it, say hello, and send
    every partition's current state again (units are reconciled by `sync`).  One owner per
    pilot: refused while the owner is alive (heard from within OWNER_SILENCE s) unless
    args.take_over; the old owner is then told (`taken_over`) and stops acting on the pilot,
    and the pilot waits (at most RELEASE_WAIT s) for its `released` before it switches.  The
    attaching client must answer a handshake first (within ATTACH_PROBE s; refused at once
    when its address refuses): a request still queued here from a client killed since (a
    take-over cut short) would otherwise take the pilot from the owner that came after it, and
    so would one whose address the live owner bound again (the probe reaches the owner itself:
    refused).  A client of another protocol is refused first (pilot/wire/peer_version.py)."""
    why = peer_version.differs({k: args.get(k) for k in ("protocol", "version", "python")},
                               "the client")  # fmt: skip
    if why is not None:
        raise Incompatible(f"args.protocol: {why}")
    owner = _owner(args.get("owner"))
    given = args.get("client")
    if isinstance(given, list) and given and len(given) <= 64:
        for i, e in enumerate(given):
            checks.endpoint(f"args.client[{i}]", e)
    else:
        given = checks.endpoint("args.client", given)
    epoch = _epoch(boot, args.get("epoch"), owner)
    current = boot.cfg.get("owner") or {}
    silent = time.monotonic() - boot.link.last_heard
    live = silent < OWNER_SILENCE and current and current != owner
    if live and not args.get("take_over"):
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(current.get("since", 0)))
        raise Owned(
            f"owned by the client on {current.get('host')}, pid {current.get('pid')}, since "
            f"{since} (heard from {silent:.1f} s ago); attach with take_over=True to take it "
            "over",
            {**current, "silent": silent, "live_for": OWNER_SILENCE - silent},
        )
    try:  # (a take-over asked by a client killed since is no take-over: the owner keeps it)
        endpoint = boot.link.find_client(given, waiting=ATTACH_PROBE)
    except OSError as exc:
        raise ValueError(f"args.client: {exc}") from None
    if live and endpoint == boot.cfg["client"]:  # the live owner answered the probe itself:
        # a request queued here from a client killed since, whose port the owner got again
        raise ValueError(
            f"args.client: {endpoint} is the live owner's (pid {current.get('pid')}), not "
            f"pid {owner.get('pid')}'s: a request of a client gone since"
        )
    if live:
        boot.link.release_owner(owner, RELEASE_WAIT)
    old = boot.cfg["client"]
    boot.link.point_at(endpoint)
    boot.cfg["owner"] = owner
    boot.cfg["epoch"] = epoch
    log.info(
        "attach: client now %s (was %s; %d messages dropped meanwhile)",
        endpoint,
        old,
        boot.link.dropped,
    )
    _new_data_dir(boot, args.get("data"))
    boot.link.hello(attach=True)
    for part in boot.pm.parts.values():
        info = {"resources": part.alloc.to_dict(boot.resources)} if part.alloc else {}
        info["description"] = part.desc.to_stored()
        if part.reason:
            info["reason"] = part.reason
        boot.emit(part.uid, part.state, info)
    boot.link.flush()
    return {"pilot": boot.uid, "partitions": len(boot.pm.parts)}


def _new_data_dir(boot, data) -> None:
    """The attaching client's data directory ({dir, token, sync}, or None: pilot/functions.py):
    when it is not the one the pilot was told of, its agents are (they write large values
    where this client reads them, if they see its directory; else they send the bytes), and
    partitions started from now on get it."""
    if not (
        isinstance(data, dict)
        and type(data.get("dir")) is str
        and len(data["dir"]) <= 4096
        and type(data.get("token")) is str
        and len(data["token"]) <= 64
        and type(data.get("sync")) is bool
    ):
        data = None
    if data == boot.cfg.get("data"):
        return
    log.info("attach: the client's data directory is %s", data and data["dir"])
    boot.cfg["data"] = data
    boot.pm.agent_cfg["data"] = data
    for part in boot.pm.parts.values():
        if part.state not in FINAL:
            boot.agents.send_agent(part.uid, msg(b"data", {"data": data}))


OWNER_SILENCE = 3 * HEARTBEAT  # an owner heard from more recently is alive
RELEASE_WAIT = 2.0  # seconds a take-over waits for the old owner's `released`
ATTACH_PROBE = 3.0  # seconds the attaching client has to answer a handshake (it is waiting)


class Incompatible(ValueError):
    """An attach refused: the client speaks another protocol (its reply says the pilot's)."""


class Owned(ValueError):
    """An attach refused: the pilot's owner is alive (`owner`: who, how long ago heard)."""

    def __init__(self, message: str, owner: dict) -> None:
        super().__init__(message)
        self.owner = owner


def _epoch(boot, value, owner: dict) -> int:
    """An attaching client's owner epoch (pmgr/core/ownership.py), checked: newer than the
    pilot's owner's, or that owner's own (it asks again); an older one is a request of a
    client the store deposed already (one killed while its request waited here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise validate.bad("args.epoch", value, "the client's owner epoch, a whole number >= 1")
    current = boot.cfg.get("epoch") or 0
    if value < current or (value == current and owner != boot.cfg.get("owner")):
        raise ValueError(
            f"args.epoch={value}: an older owner's request (the pilot's owner holds epoch "
            f"{current}): refused"
        )
    return value


def _owner(value) -> dict:
    """An attaching client's {host, pid, since}, checked."""
    owner = validate.mapping("args.owner", value if value is not None else {})
    validate.text("args.owner.host", owner.get("host"))
    for key in ("pid", "since"):
        v = owner.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise validate.bad(f"args.owner.{key}", v, "a number")
    return {k: owner.get(k) for k in ("host", "pid", "since")}


def sync(boot, cid, args: dict) -> dict:
    """The current state of these units: the outcomes the pilot keeps (partition/client/outbox.py)
    are said again at once; each partition's agent is asked for the others, and answers with
    state updates and a `synced` message naming the uids it does not know; a partition without
    an agent knows none of them."""
    units = validate.mapping("args.units", args.get("units"))
    for part_uid, uids in units.items():
        checks.uid("args.units key", part_uid)
        checks.uids(f"args.units[{part_uid!r}]", uids)
    waiting = []
    kept = []
    for part_uid in list(units):
        found, units[part_uid] = boot.outbox.answer(units[part_uid])
        kept += found
    if kept:
        boot.link.flush()
        boot.link.to_client(updates.of_records(kept).frames())
    for part_uid, uids in units.items():
        part = boot.pm.parts.get(part_uid)
        if part is not None and part.state not in FINAL and part.uid in boot.agents.procs:
            boot.agents.send_agent(part_uid, [b"sync", pack({"cid": cid, "uids": uids})])
            waiting.append(part_uid)
        elif part is not None and part.state not in FINAL and part.exit is not None:
            continue  # (its agent exited; its last words may be on their way: nothing is
            # said now, and the client asks again once the partition ended)
        else:
            if part is not None and part.state not in FINAL and part.buffered:
                held = _buffered(part)  # (to its agent once it is up: it answers for them)
                uids = [u for u in uids if u not in held]
            back, started = _agent_gone(boot, part_uid, uids)
            if back:  # (it never ran them: routed again, outbox.py)
                said = [{"uid": u} for u in back]
                boot.link.to_client(msg(b"back", {"part": part_uid, "units": said}))
            body = {"cid": cid, "part": part_uid, "unknown": []}
            if started:
                body["started"] = started
            boot.link.to_client(msg(b"synced", body))
    return {"asked": waiting}


def _buffered(part) -> set[str]:
    """The uids of the units a partition not ACTIVE yet holds for its agent."""
    held = set()
    for batch in part.buffered:
        try:
            units = unpack(batch[0])
        except ProtocolError:  # (its agent will refuse it: nothing of it is held)
            continue
        for u in units if type(units) is list else ():
            if type(u) is dict and type(u.get("uid")) is str:
                held.add(u["uid"])
    return held


def _agent_gone(boot, part_uid: str, uids: list[str]) -> tuple[list, list]:
    """What a partition whose agent is gone (or that never had one) says of `uids`, from its
    start journal (a line a unit, written before the unit starts): (those it never started:
    `back`, routed again, whether it handed them back, queued them, or never had them; those
    it started: their outcome is unknown, and they never run again).  A journal that cannot
    be read: any may have started."""
    if not uids:
        return [], []
    asked = set(uids)
    try:
        with open(journal_path(boot.sandbox, part_uid)) as f:
            started = {u for u in (line.strip() for line in f) if u in asked}
    except FileNotFoundError:  # (no unit ever started there)
        started = set()
    except OSError as exc:
        log.warning("%s: cannot read its start journal (%s): its units may have run", part_uid,
                    exc)  # fmt: skip
        return [], list(uids)
    return [u for u in uids if u not in started], [u for u in uids if u in started]


OPS = {
    "reconfig": reconfig,
    "cancel_units": cancel_units,
    "give_back": give_back,
    "stop_parts": stop_parts,
    "cancel_pilot": cancel_pilot,
    "partitions": partitions,
    "nodes": nodes,
    "attach": attach,
    "sync": sync,
}


def run(boot, body: dict) -> dict:
    """Run one command; the reply never raises."""
    cid = body.get("cid")
    try:
        if cid is not None:
            cid = validate.text("cid", cid)
        op, args = body.get("op"), body.get("args")
        if not isinstance(op, str) or op not in OPS:
            raise validate.bad("op", op, f"one of {', '.join(OPS)}")
        args = validate.mapping("args", {} if args is None else args)
        return {"cid": cid, "ok": True, "result": OPS[op](boot, cid, args)}
    except ValueError as exc:  # (validate.Invalid among them) refused, saying why
        log.warning("command refused: %s", exc)
        reply: dict = {"cid": cid if isinstance(cid, str) else None, "ok": False, "error": str(exc)}
        if isinstance(exc, Owned):
            reply["owner"] = exc.owner
        if isinstance(exc, Incompatible):
            reply.update(peer_version.mine())
        return reply
    except Exception as exc:  # our own bug: said as such
        boot.internal.report(f"command {body.get('op')!r:.40}", exc)
        error = f"internal error: {type(exc).__name__}: {exc}"
        return {"cid": cid if isinstance(cid, str) else None, "ok": False, "error": error}
