"""Client-side handles of pilots, partitions and units: state, history, wait and callbacks.

All state changes arrive on the session's channel thread and go through `Stateful.advance`
under the session lock: the shared state machine checks the move (IllegalTransition otherwise),
the history gets (state, timestamp), the store gets the record, waiters are woken and the
registered callbacks run: the object's own, then its manager's (`manager_callbacks`), after the
lock is released, on the channel thread (a callback may
submit units or reconfigure, but must not block waiting for states, which would hang the thread
that delivers them; `wait()` there raises instead).  An update the machine refuses is not
applied and is logged with the object and both states.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pilot import functions, states as S
from pilot.pmgr.core.blueprint import ARGS, FUNCTION, OWN, Blueprint, own_of
from pilot.pmgr.store.base import FIELDS, Own, UnitDoc, laid_over
from pilot.sandbox import functions_dir, output_names, sandbox_of
from pilot.seen import uid_number
from pilot.unit_record import UnitRecord

if TYPE_CHECKING:
    from transitions import Machine

UNIT_STATE, PILOT_STATE = "UNIT_STATE", "PILOT_STATE"  # callback metrics (RP's names)


def callback(where: str, cb, metric: str, cb_data=None, accepted: tuple = ()):
    """A state callback as registered: cb(obj, state), or cb(obj, state, cb_data)."""
    accepted = accepted or (UNIT_STATE if "Unit" in where else PILOT_STATE,)
    if metric not in accepted:
        raise ValueError(f"{where}: metric={metric!r} is not supported; accepted: {accepted}")
    if not callable(cb):
        raise ValueError(f"{where}: cb={cb!r} must be callable as cb(obj, state)")
    if cb_data is None:
        return cb
    return lambda obj, state: cb(obj, state, cb_data)


class Stateful:
    KIND = ""
    MACHINE: Machine | None = None  # (each kind's own: Pilot's, Partition's, Unit's)

    def __init__(self, session, uid: str, created: float | None = None) -> None:
        self.session = session
        self.uid = uid
        self.state = S.NEW
        self.history: list[tuple[str, float]] = [(S.NEW, created or time.time())]
        self.reason: str | None = None
        self.stored = False  # written to the store once (its description with it)
        self.callbacks: tuple = ()  # (most have none: no list per unit for the collector)
        self.settled = True  # False from a final state until its callbacks have run

    def register_callback(self, cb, metric: str | None = None, cb_data=None) -> None:
        """cb(obj, state) after every state change of this object; with cb_data,
        cb(obj, state, cb_data).

        The object's callbacks run before its manager's, outside the session lock, on the
        thread that delivers states (they must not wait for states there).

        Args:
            cb (callable): the callback.
            metric (str | None): `rp.UNIT_STATE` for a unit, `rp.PILOT_STATE` for a pilot or
                a partition; None: that one.
            cb_data (object): passed to `cb` as its last argument when not None.

        Raises:
            ValueError: another `metric`, or a `cb` that is not callable.
        """
        own = UNIT_STATE if self.KIND == "units" else PILOT_STATE  # partitions: a pilot's
        where = f"{type(self).__name__}.register_callback"
        self.callbacks = (*self.callbacks, callback(where, cb, metric or own, cb_data, (own,)))

    def manager_callbacks(self) -> list:
        """The callbacks of the manager that owns this object, run after its own."""
        return []

    def wait(self, state=None, timeout: float | None = None) -> str:
        """Block until the object is in `state` (one or a list) or in a final state; returns the
        state.  TimeoutError (naming the object and its state) after `timeout` seconds.

        A final state counts once the object's callbacks for it have run (in a callback, at
        once).

        Args:
            state (str | list[str] | None): the state(s) to wait for; None: a final one.
            timeout (float | None): seconds; None waits as long as it takes.

        Returns:
            str: the state the object is in when the wait ended.

        Raises:
            TimeoutError: `timeout` passed, naming the object and its state.
            RuntimeError: called in a state callback (the thread that delivers states).
        """
        assert self.MACHINE is not None  # (every kind that is waited for names its machine)
        wanted = S.waited(state, self.MACHINE, f"{type(self).__name__}.wait")
        settle = not self.session.changes.in_callback()  # final: once its callbacks have run

        self.session.wait_for(
            lambda: self.state in wanted and (self.settled or not settle),
            timeout,
            lambda: f"{self.uid} is {self.state}, waited for {sorted(wanted)}",
        )
        return self.state

    def advance(self, state: str, ts: float, reason: str | None) -> bool:
        """Move to `state` (filling in states skipped on the way); False if already there.
        IllegalTransition (nothing changed) for a move the state machine does not allow."""
        if state == self.state:
            return False
        assert self.MACHINE is not None  # (every kind that advances names its machine)
        steps = S.legal_path(self.MACHINE, self.state, state)
        if steps is None:  # raises, naming the first illegal step; nothing changed
            src = self.state
            for step in S.path_to(self.MACHINE, src, state):
                S.check_move(self.MACHINE, self.uid, src, step)
                src = step
            raise AssertionError(f"{self.uid}: {self.state} -> {state}: no step was refused")
        for step in steps:
            self.state = step
            self.history.append((step, ts))
            if reason and step in S.FINAL:
                self.reason = reason
            if step in S.FINAL:
                self.settled = False  # session.changes.fire settles it
            self.session.changes.record(self, step, ts)
        return True

    @property
    def final(self) -> bool:
        """Whether it is in a final state (DONE, FAILED or CANCELED)."""
        return self.state in S.FINAL

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.uid} {self.state}>"


assert FIELDS["units"] == (  # (Unit.as_doc makes them in this order)
    "uid", "session", "pilot", "partition", "state", "reason", "exit_code", "node", "slots",
    "description", "return_value", "exception", "kept", "times",
)  # fmt: skip


def advance_together(session, units: list, state: str, ts) -> None:
    """(lock held, inside session.locked()) Each of `units` moves to `state` at `ts` (one time
    for all, or a list), one direct step of the unit machine each (the caller checked: see
    DIRECT; a unit class that changes `advance` goes its own way): Unit.advance's short way
    for a batch: one record for the store (pmgr/store/writer.py MovedTogether), callbacks
    queued for the units that have any, and for every final state."""
    final = state in S.FINAL
    prevs = [u.state for u in units]
    seqs = []
    one_ts = type(ts) is not list
    for i, u in enumerate(units):
        u.state = state
        h = u.history
        h.append((state, ts if one_ts else ts[i]))
        seqs.append(len(h) - 1)
    if final:
        for u in units:
            u.settled = False  # session.changes.fire settles it
    reasons = [u.reason for u in units] if final else None
    session.changes.record_together(state, units, ts, seqs, prevs, reasons)


# the unit moves a single step of the machine makes (advance_together's)
DIRECT = frozenset(S.legal_moves(S.UNIT_MACHINE))


class Unit(Stateful):
    """A unit's handle: its state and history, where it ran, and its outcome.  Made by
    `UnitManager.submit_units` (not directly).

    A unit is followed to exactly one final state (DONE, FAILED, CANCELED).  Once final,
    stored and its callbacks run, its manager lets go of it; while you hold the handle it
    stays as it is, and `umgr.get_units` makes it again from the store otherwise.

    Attributes:
        uid (str): its id (`unit.000000`, ...; a TaskDescription's own uid).
        state (str): its current state (`rp.NEW` ... `rp.DONE`, `rp.FAILED`, `rp.CANCELED`).
        history (list[tuple[str, float]]): (state, time.time()) of every state it passed.
        reason (str | None): why it ended FAILED or CANCELED (None otherwise).
        description (ComputeUnitDescription): the description it was submitted with.
        umgr (UnitManager): its manager.
        pilot (Pilot | None): the pilot it was sent to (None until then).
        part (str | None): the uid of the partition it was sent to.
        exit_code (int | None): its exit code, once it ended on a pilot.
        node (str | None): the node it ran on, as its agent reported it.
        slots (dict | None): the cores and GPUs it was placed on.
        exception (str | None): a function unit's exception ("Type: message"), FAILED.
    """

    KIND = "units"
    MACHINE = S.UNIT_MACHINE
    TOGETHER = True  # its moves may go advance_together's way (its `advance` is Unit's)

    def __init__(
        self,
        session,
        uid: str,
        description,
        umgr,
        created: float | None = None,
        blueprint: Blueprint | None = None,
        number: tuple | None = None,
    ):
        super().__init__(session, uid, created)
        # (prefix, number) of its uid, (prefix, None) for a uid of the user's own (seen.py)
        self.number = number if number is not None else uid_number(uid)
        self.description = description
        # what the units of its description share, captured at submit (pmgr/core/blueprint.py)
        self.blueprint = bp = blueprint or Blueprint(description)
        # its own arguments (a list), or its call's (a str), copied now: not its blueprint's
        # (pmgr/core/blueprint.py)
        self.own = own_of(description)
        self.value: str | None = None  # a function unit's packed return value (as stored)
        self.exception: str | None = None  # a function unit's exception, "Type: message"
        self.client_in = bp.client_in
        self.client_out: Sequence[dict] = bp.client_out  # (emptied, a list, once they are done)
        self.staged_on = None  # the Pilot its client inputs were transferred to
        self.staging_out = False  # its client outputs are being transferred
        # stdout / stderr of a `cleanup` unit (its files are gone); the reason of a cancel
        # asked of its partition (CANCEL_KEY: kept in the store with its doc, for an attach)
        self.kept: dict = {}
        self.umgr = umgr
        self.asked = bp.asked  # (cores, GPUs) it asks for over all its ranks (unit_flow)
        self.held: tuple | None = None  # (partition, cores, GPUs) it holds, once EXECUTING
        # (state, partition) its doc in the store has, and is being written with (the writer's)
        self.written: tuple | None = None
        self.writing: tuple | None = None
        self.bound = None  # round robin: the Pilot it waits for (pmgr/core/routing.py)
        # the reason of a cancel asked of its partition: should the unit come back unrun (its
        # partition stopped or lost first), it ends CANCELED, not routed again (unit_events)
        self.cancel_asked: str | None = None
        self.after: Unit | None = None  # `tag`: the earlier unit it runs beside
        self.part: str | None = None
        # the Pilot handle it was sent to (Any: pmgr/core/pilot.py imports this module)
        self.pilot: Any = None
        self.exit_code: int | None = None
        self.node: str | None = None
        self.slots: dict | None = None
        self._output: list[tuple] | None = None  # (made at the first output forwarded)
        self._output_bytes = 0

    @property
    def return_value(self):
        """What a function unit's call returned (None until it is DONE, or for others)."""
        value = self.value
        if type(value) is str and value.startswith(functions.VALUE_REF):  # (its worker wrote
            # it to the session's data files: read from there)
            data = self.session.store.data
            if data is None:
                raise LookupError(f"{self.uid}: its value is a data file, and this store has none")
            value = data.get(value[len(functions.VALUE_REF) :])
        return functions.unpack_value(value)

    def manager_callbacks(self) -> list:
        return self.umgr.callbacks

    OUTPUT_MAX = 1 << 20  # forwarded output kept per unit (bytes); the sandbox files have all

    @property
    def output(self) -> list[tuple]:
        """Output forwarded by node daemons: [(node, rank, stream, text)] in arrival order."""
        with self.session.locked():
            return list(self._output or ())

    def add_output(self, node: str, rank: int, stream: str, text: str) -> None:
        """Keep output forwarded by a node daemon (the channel thread calls it); beyond
        OUTPUT_MAX bytes (1 MiB) for the unit, more is dropped (the sandbox files have all).

        Args:
            node (str): the node's name.
            rank (int): the rank that wrote it.
            stream (str): "stdout" or "stderr".
            text (str): the text.
        """
        if self._output_bytes < self.OUTPUT_MAX:
            if self._output is None:
                self._output = []
            self._output.append((node, rank, stream, text))
            self._output_bytes += len(text)

    def wire(self) -> UnitRecord:
        """What the agent gets: the unit as placed and run there."""
        rec = UnitRecord(self.blueprint.wire)
        rec["uid"] = self.uid
        own = self.own
        if type(own) is str:  # (its call's arguments: the call whole)
            rec[FUNCTION] = {**rec[FUNCTION], ARGS: own}
        elif own is not None:
            rec[OWN] = own
        return rec

    def own_fields(self) -> dict | None:
        """Its fields that are not its blueprint's, as its doc carries them (None: none)."""
        own = self.own
        if own is None:
            return None
        return {FUNCTION: {ARGS: own}} if type(own) is str else {OWN: own}

    @property
    def sandbox(self) -> str | None:
        """Its directory on the pilot: <pilot sandbox>/<its description's sandbox, else its
        uid>; a function unit's is its partition's workers' directory (<pilot
        sandbox>/<partition uid>.functions).  None until it was sent to a pilot."""
        if self.pilot is None:
            return None
        if self.description.function is not None:  # its partition's workers' directory
            if self.part is None:  # (routed again, its pilot kept: no partition's yet)
                return None
            return functions_dir(self.pilot.sandbox, self.part)
        return sandbox_of(
            self.pilot.sandbox, {"uid": self.uid, "sandbox": self.description.sandbox}
        )

    def _read(self, key: str, name: str) -> str:
        if key in self.kept:
            return self.kept[key]
        if self.sandbox is None or self.description.function is not None:
            return ""  # (a function unit's output comes with its end, when it wrote any)
        try:
            with open(os.path.join(self.sandbox, name), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    @property
    def stdout(self) -> str:
        """What it wrote to stdout: kept at the client for a `cleanup` unit and a function
        unit (read back from the store once released), else read from the file in its
        sandbox as this host sees it; "" when there is none (yet)."""
        return self._read("stdout", output_names(self.wire())[0])

    @property
    def stderr(self) -> str:
        """What it wrote to stderr, as `stdout`; a function unit's traceback when it
        FAILED."""
        return self._read("stderr", output_names(self.wire())[1])

    def cancel(self) -> None:
        """Cancel this unit (`UnitManager.cancel_units`): killed if it runs; a final unit is
        left as it is."""
        self.umgr.cancel_units([self.uid])

    @property
    def name(self) -> str | None:
        """Its description's `name` (None if it has none)."""
        return self.description.name

    @property
    def unit_sandbox(self) -> str | None:  # RP's names
        """`sandbox` (RADICAL-Pilot's name)."""
        return self.sandbox

    @property
    def pilot_sandbox(self) -> str | None:
        """The sandbox of the pilot it was sent to (None until then)."""
        return self.pilot.sandbox if self.pilot else None

    @property
    def client_sandbox(self) -> str:
        """The session directory (RADICAL-Pilot's name)."""
        return self.session.dir

    @property
    def metadata(self):
        """Its description's `metadata`, as given."""
        return self.description.metadata

    def as_dict(self) -> dict:
        """RADICAL-Pilot's view of a unit (its keys), plus ours."""
        with self.session.locked():
            out = {
                "type": "unit",
                "umgr": self.umgr.uid,
                "uid": self.uid,
                "name": self.name,
                "state": self.state,
                "exit_code": self.exit_code,
                "pilot": self.pilot.uid if self.pilot else None,
                "partition": self.part,
                "unit_sandbox": self.sandbox,
                "pilot_sandbox": self.pilot_sandbox,
                "client_sandbox": self.session.dir,
                "node": self.node,
                "reason": self.reason,
                "metadata": self.metadata,
                "description": type(self.description)
                .from_stored(laid_over(self.blueprint.stored.value, self.own_fields()))
                .as_dict(),
            }
        out["stdout"] = self.stdout
        out["stderr"] = self.stderr
        return out

    def as_doc(self, full: bool = True) -> UnitDoc:
        """Its doc for the store (the store's FIELDS["units"], in order): its description
        the first time only (`full`), its history once final (read back with it)."""
        final = self.state in S.FINAL
        return UnitDoc(
            (
                self.uid,
                self.session.uid,
                self.pilot.uid if self.pilot else None,
                self.part,
                self.state,
                self.reason,
                self.exit_code,
                self.node,
                self.slots,
                self._stored_description() if full else None,
                self.value,
                self.exception,
                self.kept or None,
                self.history if final else None,
            )
        )

    def _stored_description(self):
        """Its description as its first doc carries it: the blueprint's Template, with its own
        fields beside it when it has any (pmgr/store/base.py, Own)."""
        own = self.own_fields()
        return self.blueprint.stored if own is None else Own(self.blueprint.stored, own)


CANCEL_KEY = "cancel_asked"  # (Unit.kept: see cancel_asked)


class Partition(Stateful):
    """A partition's handle: a share of a pilot's nodes with an agent of its own, its state
    and history.  Made by the pilot (`pilot.partitions`, `pilot.reconfig`), not directly.

    Attributes:
        uid (str): its id (`<pilot uid>.part.0000`, ...).
        state (str): its current state (rp.NEW ... rp.ACTIVE, then a final one).
        history (list[tuple[str, float]]): (state, time.time()) of every state it passed.
        reason (str | None): why it ended FAILED or CANCELED.
        description (ComputePartitionDescription): what it was made from.
        pilot (Pilot): its pilot.
        resources (dict | None): what its agent reported once ACTIVE: `cores`, `gpus`, `nodes`
            (each with its cores and GPUs), `agent_nodes`; None before.
        started_by (str | None): the id of the reconfig command that started it (None: one
            the pilot was submitted with).
        stopped_by (str | None): the id of the reconfig command that stopped it.
    """

    KIND = "partitions"
    MACHINE = S.PARTITION_MACHINE

    def __init__(self, session, uid: str, description, pilot) -> None:
        super().__init__(session, uid)
        self.description = description
        self.pilot = pilot
        self.resources: dict | None = None  # {cores, gpus, nodes: [...], agent_nodes}
        self.started_by: str | None = None  # reconfig command ids, as the bootstrap says them
        self.stopped_by: str | None = None
        self.outstanding = 0  # units sent here and not final
        self.accepting = True  # False once a stop was asked for or it handed units back
        self.reserved = False  # True: only units that name it go there (see could_hold)
        # (monotonic) when units queued here were asked back for a partition with free cores
        # (pmgr/core/routing.py rebalance); 0.0: none asked, or the answer came
        self.giving_back = 0.0
        # its function workers read and write large pickles in the session's data directory
        # (its agent found the directory's token there: pilot/functions.py, by reference)
        self.data_shared = False
        self.ended = 0  # units that ended here (counted by the UnitManager)
        self._rate = 0.0  # units ended per second, recently
        self._mark = (time.monotonic(), 0)

    @property
    def cores(self) -> int:
        """Its cores, as its agent reported them (0 until it is ACTIVE)."""
        return self.resources["cores"] if self.resources else 0

    WINDOW_BASE = 768  # units beyond 4 x cores, whatever the rate (none is known at first)
    WINDOW_AHEAD = 0.5  # seconds of work at the recent rate, beyond that
    WINDOW_MAX = 20_000

    def rate(self) -> float:
        """Units ended here a second, recently (over the last tenth of a second or more,
        smoothed: a rise counts at once, a fall by halves)."""
        now = time.monotonic()
        since, ended = self._mark
        if now - since >= 0.1:
            rate = (self.ended - ended) / (now - since)
            self._rate = rate if rate > self._rate else (self._rate + rate) / 2
            self._mark = (now, self.ended)
        return self._rate

    @property
    def window(self) -> int:
        """`window_for(coming=False)`."""
        return self.window_for(False)

    def window_for(self, coming: bool) -> int:
        """How many units not yet final the client lets this partition hold: short units
        end faster than a round trip of reports and new units, and the client's threads, which
        share the interpreter lock and, on a local pilot, the cores with the units, stall for
        100-300 ms at a time (measured: at 4,000 function units/s a window of 264 left the
        agent's queue empty on 24 of 40 arrivals; 5,000 null units on 2 cores ran 6 % faster,
        7 alternating runs, with 768 + 0.5 s of work than with 256 + 0.25 s).  While another
        partition is `coming` up (a reconfig started it), 2 x cores and what it ends in
        WINDOW_AHEAD s: the units beyond wait at the client, where the new partition takes
        its share once it is ACTIVE (units sent here would wait behind this one's, the new
        one idle)."""
        ahead = int(self.rate() * self.WINDOW_AHEAD)
        if coming or getattr(self.pilot, "adapt", None) is not None:  # an adaptive pilot too:
            # units wait at the client, where a partition it grows for them can take them
            # (pmgr/core/adapt.py)
            return min(2 * self.cores + ahead, self.WINDOW_MAX)
        return min(4 * self.cores + self.WINDOW_BASE + ahead, self.WINDOW_MAX)

    @property
    def gpus(self) -> int:
        """Its GPUs, as its agent reported them (0 until it is ACTIVE)."""
        return self.resources["gpus"] if self.resources else 0

    def could_hold(self, cores: int, gpus, ranks: int, needs: tuple | None = None) -> bool:
        """Whether an empty partition of this shape could hold such a unit (routing only;
        the agent decides with the full pool), with `needs` (pmgr/core/blueprint.py
        `needs_of`): its node pin (a node of that name or host id among the partition's) and
        its other resource types (as many slots of each on a node its first rank fits).  A
        `reserved` partition (a Raptor's, pmgr/compat/rp1/raptor.py) holds only units that
        name it (partition=)."""
        if not self.resources or self.reserved:
            return False
        nodes = self.resources["nodes"]
        if needs is not None and needs[0] is not None:
            kind, value = needs[0]
            key = "name" if kind == "HOST_NAME" else "host_id"
            nodes = [n for n in nodes if n.get(key) == value]
        fits = [n for n in nodes if len(n["cores"]) >= cores and len(n["gpus"]) >= math.ceil(gpus)]
        if needs is not None and needs[1]:
            first = [n for n in fits if all(_slots(n, t) >= a for t, a in needs[1])]
            if not first:
                return False
        if not fits:
            return False
        return ranks == 1 or sum(len(n["cores"]) // cores for n in fits) >= ranks

    def largest_node(self) -> tuple[int, int]:
        """The most cores and the most GPUs one of its nodes has (each its own maximum).

        Returns:
            tuple[int, int]: (cores, gpus); (0, 0) until it is ACTIVE.
        """
        if not self.resources:
            return (0, 0)
        return (
            max(len(n["cores"]) for n in self.resources["nodes"]),
            max(len(n["gpus"]) for n in self.resources["nodes"]),
        )

    def cancel(self, timeout: float | None = None) -> None:
        """Stop this partition: queued units go to another partition, running ones are CANCELED.

        Args:
            timeout (float | None): seconds to wait for it to end (not waited for in a state
                callback); None waits as long as it takes.

        Raises:
            TimeoutError: it did not end within `timeout`.
        """
        self.pilot.stop_partitions([self.uid], "canceled by the user", timeout)

    def as_doc(self, full: bool = True) -> dict:
        return {
            "uid": self.uid,
            "session": self.session.uid,
            "pilot": self.pilot.uid,
            "state": self.state,
            "description": self.description.to_stored() if full else None,
            "resources": self.resources,
            "reason": self.reason,
            "started_by": self.started_by,
            "stopped_by": self.stopped_by,
        }


def _slots(node: dict, kind: str) -> float:
    """(could_hold) The slots of a resource type on a node as its partition reported it; -1
    when the node has no such type."""
    try:
        instances = (node.get("pool") or {}).get(kind)
        return -1 if instances is None else sum(i.get("slots", 1) for i in instances)
    except (AttributeError, TypeError):  # (a report of another form: let the agent decide)
        return math.inf
