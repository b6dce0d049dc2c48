"""A unit as it travels from the client to its partition's agent, and as that agent keeps it.

`UnitRecord` is the one record type: a dict whose items are exactly what goes on the wire (the
`units` message is JSON), keys among FIELDS, a missing key meaning its default; the agent's own
fields are attributes (`__slots__`), declared below and never sent.  The client builds one from
a description (`for_description`, once per unit, at submit); the agent checks what arrived
(`UnitRecord.arrived`: every field it uses, named in the error) before it queues the unit.

A `units` message is a list of such records, or of bulks {"of": the fields every unit of the
bulk shares, "uids": [uid, ...]} and, when any unit of it has arguments of its own,
"arguments": [each unit's list, or null], aligned with "uids" (the client sends units made from
one description, or from descriptions that differ in their arguments only, and routed together
that way: the shared fields are checked once a bulk, each unit's arguments on their own:
`arrived_bulk`, `copy_for`).  Calls whose arguments are their units' own
(pmgr/core/blueprint.py `own_function`) come the same way: a bulk whose template is a function
unit's, its call without arguments (checked once), and "functions": [each unit's call's
arguments], aligned with "uids" (each call, with its arguments, checked on its own:
`with_call`); a call alone whole in its unit's record, and the same call again in a row whole
in the bulk's template.

FIELDS (wire key: what it is; default when absent)
    uid          the unit's id                                                  (required)
    executable   the program (not with `function`)
    function     a packed call (pilot/functions.py) for a Python worker
    arguments    [str], each one word (agent/unit_command.py has the shell rule)          []
    environment  {name: value}, placeholders %(<type>_ids)s filled at the agent            {}
    cpus         cores per rank                                                            1
    gpus         GPUs per rank (a fraction 0 < x < 1 shares one)                           0
    ranks        processes                                                                 1
    resources    {type: count} per rank of user-defined pool types                        {}
    policy       placement fields that differ from the agent's defaults (pilot/policy.py)  {}
    pre_exec / post_exec   shell lines before / after the command                         []
    stage_in / stage_out   pilot-side staging directives (pilot/staging.py)               []
    shell        True: always through /bin/sh, False: never; absent: as needed
    cleanup      remove its sandbox once it ended (its output travels with its end)    false
    mpi          one MPI starter over its ranks (the resource's mpi_command)            false
    keep_output  make STDOUT / STDERR even when empty (its staging may name them)      false
    name         a name (RP_UNIT_NAME)
    priority     an integer: a higher one is started first among units waiting            0
    sandbox      its directory under the pilot sandbox (default: its uid)
    stdout / stderr   file names in its sandbox (default STDOUT / STDERR)
    prof         "command": RP 1.x's $RP_PROF (a command, RP_PROF_TGT its file); absent: RP
                 0.90's, a ComputeUnit's (its profile file): agent/rank_env.py
Agent's own (attributes):
    taken_sandbox  its sandbox, made ahead for it and given back (a lane's queue ahead)
    not_found      its program is not on PATH: its shell runs it and says so (exit 127)
    overtaken      how many units started ahead of it while it waited (agent/scheduler.py)
"""

from __future__ import annotations

import reprlib

from pilot import functions, staging, validate
from pilot.policy import AGENT_DEFAULTS
from pilot.wire import checks

FIELDS = (
    "uid executable function arguments environment cpus gpus ranks resources policy pre_exec "
    "post_exec stage_in stage_out shell cleanup mpi keep_output name sandbox stdout stderr "
    "priority prof"
).split()
_COMMON = frozenset(("uid", "executable", "function", "arguments", "environment", "cpus", "gpus"))
_KNOWN = frozenset(FIELDS)


class UnitRecord(dict):
    """A unit on the wire (its items) and at its agent (its attributes, set by `arrived`:
    see the header; a record the client builds has none of them)."""

    __slots__ = ("taken_sandbox", "not_found", "overtaken")
    taken_sandbox: str | None
    not_found: bool
    overtaken: int

    # -- the client's side ---------------------------------------------------------------------
    @classmethod
    def for_description(cls, uid: str, description, stored: dict) -> UnitRecord:
        """What the agent gets for a unit of `description` (`stored`: its to_stored(), the
        policy in it as merged at construction): defaults are left out."""
        rec = cls(uid=uid)
        rec.update(cls.template_of(description, stored))
        if description.function is None:
            rec["arguments"] = description.peek("arguments")
        return rec

    @classmethod
    def template_of(cls, description, stored: dict) -> UnitRecord:
        """`for_description` without the uid and the arguments: what every unit of
        `description` shares (the client sends units that share it as one bulk, each with
        its own arguments)."""
        d = description
        pol = d.policy
        rec = cls()
        if d.function is not None:  # a call for a Python worker (pilot/functions.py)
            rec["function"] = stored["function"]  # (without its arguments when they are
            # each unit's own: pmgr/core/blueprint.py)
        else:
            rec["executable"] = d.executable
            rec["environment"] = d.peek("environment")
        cores = len(pol.cpu_affinity) if pol.cpu_affinity is not None else d.rank_cores
        gpus = len(pol.gpu_affinity) if pol.gpu_affinity is not None else d.rank_gpus
        rec["cpus"] = cores
        if gpus:
            rec["gpus"] = gpus
        if d.peek("resources"):
            rec["resources"] = dict(d.peek("resources"))
        if d.ranks != 1:
            rec["ranks"] = d.ranks
        placing = _placing(stored["policy"])
        if placing:
            rec["policy"] = placing
        if d.priority:
            rec["priority"] = d.priority
        if d.function is not None:
            for key in ("environment", "name"):
                if d.peek(key):
                    rec[key] = d.peek(key)
            return rec
        rec._process_fields(d)
        if d.RP_PROF != "file":
            rec["prof"] = d.RP_PROF
        return rec

    def _process_fields(self, d) -> None:
        env = d.peek("environment")
        if d.cpu_thread_type == "OpenMP" and "OMP_NUM_THREADS" not in env:
            self["environment"] = {**env, "OMP_NUM_THREADS": str(d.rank_cores)}
        for key in ("pre_exec", "post_exec", "name", "sandbox", "stdout", "stderr", "cleanup"):
            if d.peek(key):
                self[key] = d.peek(key)
        if d.shell is not None:
            self["shell"] = d.shell
        if "MPI" in (d.cpu_process_type, d.gpu_process_type):
            self["mpi"] = True  # one MPI starter over its ranks (agent/unit_command.py)
        # staging: pilot-side steps go with the unit to its agent, client-side ones are done
        # at the client (pmgr/core/transfers.py) before it is sent / before it is DONE
        for key, field in (("stage_in", "input_staging"), ("stage_out", "output_staging")):
            steps = [s for s in d.peek(field) if not staging.at_client(s)]
            if steps:
                self[key] = steps
        if d.peek("output_staging"):  # its directives may name STDOUT / STDERR, even empty
            self["keep_output"] = True

    # -- the agent's side ----------------------------------------------------------------------
    @classmethod
    def arrived_bulk(cls, data) -> tuple[UnitRecord | None, list, str | None, list | None]:
        """A bulk {"of": template, "uids": [...], "arguments": [...]?} as it arrived: (the
        template as a record checked with its first uid (and no arguments when each unit has
        its own: every unit's record is then a `copy_for`), the uids, None, each unit's
        arguments or None) or (None or the record, the uids, what is wrong, ...): every
        unit of a bulk fails alike, but for its own arguments (`copy_for`).  (None, [],
        reason, None) when not even its uids can be read."""
        uids = data.get("uids")
        of = data.get("of")
        if (
            not isinstance(uids, list)
            or not uids
            or len(uids) > validate.LIST_MAX
            or not all(type(u) is str and checks.UID.match(u) for u in uids)
        ):
            return None, [], f"a bulk of units without valid uids: {uids!r:.80}", None
        if not isinstance(of, dict) or "uid" in of or "uids" in of or "of" in of:
            return None, uids, f"a bulk of units without a valid template: {of!r:.80}", None
        each = data.get("arguments")
        first = {**of, "uid": uids[0]}
        why: str | None
        calls = data.get("functions")
        if calls is not None:  # (each unit's call's own arguments: `with_call`)
            if each is not None:
                return None, uids, "a bulk of units with both arguments and functions", None
            if type(calls) is not list or len(calls) != len(uids):
                why = f"a bulk of {len(uids)} units whose functions are not one per unit"
                return None, uids, f"{why}: {reprlib.repr(calls)}", None
            rec, why = cls.arrived(first)  # (its call, without arguments, checked once)
            return rec, uids, why, Calls(calls)
        if each is not None:
            if type(each) is not list or len(each) != len(uids):
                why = f"a bulk of {len(uids)} units whose arguments are not one per unit"
                return None, uids, f"{why}: {reprlib.repr(each)}", None
            first.pop("arguments", None)  # (each unit's own: `copy_for`)
        rec, why = cls.arrived(first)
        return rec, uids, why, each

    def copy_for(self, uid: str, arguments=False) -> tuple[UnitRecord, str | None]:
        """This (checked) record for another unit of its bulk, with `arguments` of its own
        (a bulk's "arguments" item: a list, or None for none; False: the record's): (the
        record, what is wrong with those arguments, or None)."""
        rec = UnitRecord(self)
        rec["uid"] = uid
        rec.taken_sandbox, rec.not_found, rec.overtaken = None, self.not_found, 0
        if arguments is False:
            return rec, None
        if arguments is None:
            rec.pop("arguments", None)
            return rec, None
        rec["arguments"] = arguments
        try:
            _check_arguments(arguments)
        except ValueError as exc:
            return rec, str(exc)
        return rec, None

    def with_call(self, uid: str, args) -> tuple[UnitRecord, str | None]:
        """This (checked) record of a bulk of calls for another of its units, its call with
        the arguments of its own (a bulk's "functions" item): (the record, what is wrong with
        those arguments, or None)."""
        rec, _ = self.copy_for(uid)
        call = rec.get("function")
        if type(call) is not dict:  # (a bulk of calls whose template is a program's)
            return rec, "a bulk's arguments of calls for a unit that is not a call"
        rec["function"] = call = {**call, "args": args}
        try:
            if type(args) is not str:
                raise validate.bad("function.args", args, "a call's arguments as text")
            _check_call(call)
        except ValueError as exc:
            return rec, str(exc)
        return rec, None

    @classmethod
    def arrived(cls, data) -> tuple[UnitRecord | None, str | None]:
        """(the record, None) for a unit that arrived well-formed, else (None or the record,
        the reason): None when not even its uid can be read."""
        uid = data.get("uid") if isinstance(data, dict) else None
        if not isinstance(uid, str) or not checks.UID.match(uid):
            return None, f"a unit without a valid uid: {data!r:.80}"
        rec = cls(data)
        rec.taken_sandbox, rec.not_found, rec.overtaken = None, False, 0
        return rec, rec.error()

    def error(self) -> str | None:
        """What is wrong with the fields the agent uses, naming the field; None if nothing."""
        try:
            long = validate.LINE_MAX  # HPC environments (PATH, LD_LIBRARY_PATH) run long
            self._check_call_or_program(long)
            _check_arguments(self.get("arguments") or [])
            env = validate.mapping("environment", self.get("environment") or {})
            for k, v in env.items():
                if not k or "=" in k:
                    raise validate.bad("environment key", k, "a non-empty name without '='")
                validate.text(f"environment key {k[:40]!r}", k, optional=False)
                validate.text(f"environment[{k[:40]!r}]", v, optional=False, most=long)
            for key in ("cpus", "ranks"):
                n = self.get(key, 1)
                if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1 << 31:
                    raise validate.bad(key, n, "a whole number >= 1")
            g = self.get("gpus", 0)
            if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g <= 1 << 31:
                raise validate.bad("gpus", g, "a number >= 0")
            if self.keys() - _COMMON:  # (most units have none of the others)
                self._check_rare_fields(long)
        except ValueError as exc:
            return str(exc)
        return None

    def _check_call_or_program(self, long: int) -> None:
        if "function" not in self:
            validate.text("executable", self.get("executable"), optional=False, most=long)
            return
        _check_call(self["function"])
        for key in ("executable", "arguments", "pre_exec", "post_exec", "stage_in", "mpi"):
            if self.get(key):
                raise ValueError(f"{key} does not apply to a function unit")
        if self.get("ranks", 1) != 1:
            raise validate.bad("ranks", self.get("ranks"), "1 for a function unit")

    def _check_rare_fields(self, long: int) -> None:
        """error()'s checks of the fields most units leave out; ValueError naming the field."""
        unknown = self.keys() - _KNOWN
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)[:5]}; accepted: {FIELDS}")
        validate.mapping("resources", self.get("resources") or {})
        validate.mapping("policy", self.get("policy") or {})
        for key in ("pre_exec", "post_exec"):
            for i, line in enumerate(validate.items(key, self.get(key) or [], 10_000)):
                validate.text(f"{key}[{i}]", line, optional=False, most=long)
        for key in ("stage_in", "stage_out"):
            if key in self:
                staging.check_wire(key, self[key])
        for key in ("shell", "cleanup", "mpi", "keep_output"):
            if self.get(key) is not None and not isinstance(self[key], bool):
                raise validate.bad(key, self[key], "true, false or absent")
        validate.text("name", self.get("name"))
        if self.get("prof", "command") != "command":
            raise validate.bad("prof", self["prof"], "'command' or absent")
        p = self.get("priority", 0)
        if isinstance(p, bool) or not isinstance(p, int) or abs(p) > 1 << 31:
            raise validate.bad("priority", p, "an integer")
        sandbox = validate.text("sandbox", self.get("sandbox"))
        if sandbox is not None and ".." in sandbox.split("/"):
            raise validate.bad("sandbox", sandbox, "a directory path without '..'")
        for key in ("stdout", "stderr"):
            name = validate.text(key, self.get(key))
            if name is not None and ("/" in name or name in (".", "..")):
                raise validate.bad(key, name, "a file name (no '/')")

    @classmethod
    def at_agent(cls, data: dict) -> UnitRecord:
        """A record as `arrived` makes it, without the checks (for tests and benchmarks)."""
        rec = cls(data)
        rec.taken_sandbox, rec.not_found, rec.overtaken = None, False, 0
        return rec

    @property
    def path(self) -> str | None:
        """The PATH it sets in its environment (its program is looked up there), or None."""
        env = self.get("environment")
        return env.get("PATH") if env else None


class Calls(list):
    """A bulk's "functions": each unit's call's arguments (`arrived_bulk`; the agent gives each
    unit its call with `with_call`, where a list of a program's arguments goes through
    `copy_for`)."""


def _check_call(f) -> None:
    if not functions.is_packed(f) or functions.packed_size(f) > functions.PACKED_MAX + 8:
        raise validate.bad("function", f, "a call as pilot/functions.py packs it")


_PLACING: dict[tuple, dict] = {}  # a stored policy's values -> its fields the agent needs


def _placing(policy: dict) -> dict:
    """The fields of a stored policy that differ from the agent's defaults (most units share
    one policy: remembered by its values)."""
    key: tuple | None  # (None: its values are not hashable)
    key = tuple(policy.values())
    try:
        placing = _PLACING.get(key)
    except TypeError:  # (an affinity list: not hashable; such units are few)
        placing, key = None, None
    if placing is None:
        placing = {k: v for k, v in policy.items() if v is not None and AGENT_DEFAULTS.get(k) != v}
        if key is not None and len(_PLACING) < 1024:
            _PLACING[key] = placing
    return placing


def _check_arguments(arguments) -> None:
    """ValueError naming the item when `arguments` is not a list of words."""
    for i, a in enumerate(validate.items("arguments", arguments, 100_000)):
        validate.text(f"arguments[{i}]", a, optional=False, most=validate.LINE_MAX)


def uids_of(items: list) -> list[str]:
    """The uids a `units` message's body names (records and bulks; anything else skipped)."""
    out: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if "uids" in item and isinstance(item["uids"], list):
            out.extend(u for u in item["uids"] if isinstance(u, str))
        elif isinstance(item.get("uid"), str):
            out.append(item["uid"])
    return out
