"""What every unit made from one description shares: its Blueprint, made once per description
per submit call (100,000 units of `[desc] * 100_000`, or of one description object each, cost
one to_stored() and one JSON text per distinct description object, not one per unit).

    stored      the description as the store keeps it (a store Template: its dict, and its JSON
                text made once; the store keeps each distinct text once)
    wire        what the agent gets, without the uid (pilot/unit_record.py): units routed
                together that share it go as one bulk {"of": wire, "uids": [...]}
    by_reference()   the same for a partition whose function workers see the session's data
                directory: a call's large arguments as the name of the file the store wrote
                them to ({FILE_REF: NAME}, pilot/functions.py), not the bytes (the wire form
                when the store wrote no file)
    asked       (cores, GPUs) over all its ranks (the store's unit_flow)
    client_in / client_out   its staging steps done at the client (pmgr/core/transfers.py)
    shape       (pilot, partition, cores per rank, GPUs per rank, ranks): what routing and the
                "can never fit" verdict read

A unit's `arguments` are its own, not its blueprint's (`OWN`): the units of a sweep, one
description object each with arguments of its own (`arguments=[str(i)]`), share one blueprint,
and each carries only its arguments (Unit.own): to the store (pmgr/store/base.py, Own) and to
its agent (a bulk's "arguments": pilot/unit_record.py).  So are the arguments of a packed call
(`function`) when they travel as text (`own_function`: what rp.Executor and pilot.parsl make,
one a call): the calls of one function share one blueprint, one template in the store (the call
without its arguments: the function's pickle, ~1 KB for a function of a script, once) and one
wire form, and each unit carries its call's arguments alone (its doc's own fields {"function":
{"args": ...}}, which a read lays over the template's; its record's call whole, or a bulk's
"functions": pmgr/core/routing.py `wire_list`), instead of a blueprint, a templates row and the
whole description's JSON a call.  A call whose arguments are LARGE (bytes, written to the
session's data files) keeps its own blueprint, as does a description whose `function` is a
callable (packed by to_stored, once per description).

A description changed after its units were made changes none of them: the blueprint holds the
stored form captured at submit, the unit a copy of its arguments (a description object changed
between two submit calls gets a new blueprint the second time).
"""

from __future__ import annotations

from pilot import functions, staging
from pilot.pmgr.store.base import Template
from pilot.unit_record import UnitRecord

OWN = "arguments"  # the field each unit carries itself (the header)
FUNCTION, ARGS = "function", "args"  # ... and a call's arguments, when `own_function` says so
OWN_CALL_MAX = 1 << 17  # characters of a call's arguments that may be its own (base64)


class Blueprint:
    __slots__ = ("stored", "wire", "asked", "client_in", "client_out", "shape", "needs", "refs")

    def __init__(self, description) -> None:
        stored = description.to_stored()  # captured at submit; later edits change nothing
        stored.pop(OWN, None)  # (each unit's own)
        if _own_call(description.peek(FUNCTION)):  # (its arguments each unit's own too)
            stored[FUNCTION] = {k: v for k, v in stored[FUNCTION].items() if k != ARGS}
        self.stored = Template(stored)
        self.wire = UnitRecord.template_of(description, stored)
        d = description
        self.asked = (d.ranks * d.rank_cores, d.ranks * d.rank_gpus)
        self.client_in = tuple(s for s in d.peek("input_staging") if staging.at_client(s))
        self.client_out = tuple(s for s in d.peek("output_staging") if staging.at_client(s))
        self.shape = (d.pilot, d.partition, d.rank_cores, d.rank_gpus, d.ranks)
        self.needs = needs_of(stored)  # what routing looks at beyond the shape
        self.refs: dict | None = None  # by_reference()'s, made once

    def by_reference(self) -> dict:
        """The wire form with each bytes value the store wrote to a file as its name (read
        once the unit is persisted: the store names the files as it writes them)."""
        if self.refs is not None:
            return self.refs
        files = self.stored.files
        if not files:
            return self.wire
        self.refs = _named(self.wire, files)
        return self.refs


def needs_of(stored: dict) -> tuple | None:
    """What a partition must have, beyond cores and GPUs, for a unit of this stored form to
    go there (routing: Partition.could_hold): (its node pin, (HOST_NAME, name) or (HOST_ID,
    id), or None; its other resource types, ((type, amount), ...)); None when it needs
    neither."""
    pol = stored.get("policy") or {}
    placement = pol.get("placement")
    pin = None
    if placement == "HOST_NAME":
        pin = ("HOST_NAME", pol.get("host_name"))
    elif placement == "HOST_ID":
        pin = ("HOST_ID", pol.get("host_id"))
    extra = tuple(sorted((stored.get("resources") or {}).items()))
    return (pin, extra) if pin is not None or extra else None


class Blueprints(dict):
    """A submit call's blueprints, by description object (id: the call holds every one), and
    by content: descriptions alike (a list of 100,000 made in a loop) share one."""

    def __init__(self) -> None:
        super().__init__()
        self.alike: dict = {}  # content key -> Blueprint
        self.policies: dict = {}  # id(policy), its values -> its part of the key (_content)

    def of(self, description) -> Blueprint:
        bp = self.get(id(description))
        if bp is None:
            key = _content(description, self.policies)
            bp = self.alike.get(key) if key is not None else None
            if bp is None:
                bp = Blueprint(description)
                if key is not None and len(self.alike) < 10_000:
                    self.alike[key] = bp
            self[id(description)] = bp
        return bp


def _named(value, files: dict):
    """`value` with each bytes object `files` names (by id) as {FILE_REF: name}."""
    if isinstance(value, dict):  # (the wire form itself is a UnitRecord: a plain dict here)
        return {k: _named(v, files) for k, v in value.items()}
    if type(value) is list:
        return [_named(v, files) for v in value]
    if type(value) is bytes and id(value) in files:
        return {functions.FILE_REF: files[id(value)]}
    return value


def own_of(description) -> list | str | None:
    """A unit's own field, copied at submit: its arguments (a list), or its call's (a str:
    `own_function`); None: it has none."""
    if description.function is not None:
        return own_function(description)
    own = description.peek(OWN)
    return list(own) if own else None


def own_function(description) -> str | None:
    """The arguments of the description's packed call when they are the unit's own (the
    header); else None."""
    f = description.peek(FUNCTION)
    return f[ARGS] if _own_call(f) else None


def _own_call(f) -> bool:
    """A call whose arguments are its unit's own: packed already (a dict, not a callable that
    to_stored would pack), its arguments text of at most OWN_CALL_MAX characters (the store
    binds a batch's own fields as one value)."""
    if type(f) is not dict:
        return False
    args = f.get(ARGS)
    return type(args) is str and len(args) <= OWN_CALL_MAX and functions.is_packed(f)


def _content(description, policies: dict) -> tuple | None:
    """A key equal for descriptions of equal fields but their own (OWN) (None: one that has
    no such key, as a staging directive's dict in a list): the fields a description holds (its
    non-defaults), each a hashable value; its policy's fields (captured at construction).  The key
    holds ids: it is good while the call holds the descriptions, and a policy's part is made
    once a call (`policies`: descriptions copied from one, as rp.Executor's, share theirs).
    `policies` holds ints (ids) and tuples (values) as keys: never equal to each other."""
    items: list = [type(description)]
    for name, value in description.__dict__.items():
        if name == OWN:  # (each unit's own: not the blueprint's)
            continue
        t = type(value)
        if name == FUNCTION and _own_call(value):  # (its arguments each unit's own: not the
            items.append((name, FUNCTION, value["name"], value["pickle"]))  # key's)
            continue
        if t is list:
            value = tuple(value)
        elif t is dict:
            if type(value.get("args")) is bytes:  # (a call's large arguments: never alike,
                return None  # and hashing megabytes costs what a copy does)
            value = tuple(value.items())
        elif name == "policy":  # (by identity: its values are mostly the global policy's
            # own, copied at construction, and enum members, whose hash is Python code)
            made = policies.get(id(value))
            if made is None:  # (a number for its values, alike for policies alike: hashed
                values = tuple(  # once, not with every key)
                    [tuple(v) if type(v) is list else id(v) for v in value.__dict__.values()]
                )
                try:
                    made = policies[id(value)] = policies.setdefault(values, len(policies))
                except TypeError:  # (a value that cannot be hashed: no key)
                    return None
            value = made
        items.append((name, t, value))
    key = tuple(items)
    try:
        hash(key)
    except TypeError:
        return None
    return key
