"""A seed's plan: the pilot, the workload and the faults, all drawn from the seed.

    plan = Schedule.from_seed(17, "local.nodes4")
    print(plan)                       # the plan as a table: what runs, what fails when
    Schedule.from_json(plan.to_json()) == plan

The same seed, resource and profile give the same plan on any machine with the same
abilities (`root`: the kinds that need root are left out of the draw without it, and the
plan says so).  `resource` is `local.nodes4` (four logical nodes on this machine, a node
daemon each), `slurm-netns` (the namespace SLURM of tests/slurm.sh: the client on the login
node, the pilot a batch job on compute nodes) or `mix` (one of the two, drawn from the seed).
`profile` is `full` (`make chaos`) or `short` (the three seeds of `make test`: a smaller
workload, fewer and shorter faults).

The workload: waves of units, each wave a named stream (`wave-K`) submitted at its time (a
client that attaches again submits every wave whose time has come, from its first item: the
items the store knows are skipped); the items mix `sleep` units (lognormal durations), units
of 2-4 ranks, function units and units that stage a file in and back out.

The faults, each at a time after the pilot's partitions are up (`at`, seconds):
    kill_<target>     SIGKILL; the client's kill is followed by a new client attaching
    stop_<target>     SIGSTOP, then SIGCONT after `hold` s (1-30)
        targets: client, agent, node_daemon, agent_zygote, node_zygote, bootstrap
    cut_client_link   the client <-> pilot path drops every packet for `hold` s (netns)
    cut_node_link     a compute node's link drops every packet for `hold` s (netns)
    full_store_disk   the tmpfs under the sqlite store filled for `hold` s (root)
    full_sandbox_disk the tmpfs under the units' sandboxes filled for `hold` s (root)
    take_over         a second client attaches with take_over=True; the first is deposed
    reconfig_storm    `n` reconfigs in a burst, some over-committing (more nodes than free)
    grow_end          the pilot (max_nodes) grows by a reconfig; `hold` s after its job
                      joined, the batch system ends that job (SIGTERM to it / scancel)
`pick` chooses the victim among the candidates alive at that moment (agent of which
partition, which node, ...).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random

RESOURCES = ("local.nodes4", "slurm-netns")
TARGETS = ("client", "agent", "node_daemon", "agent_zygote", "node_zygote", "bootstrap")
ITEM_KINDS = ("sleep", "ranks", "function", "staging")


@dataclasses.dataclass(frozen=True)
class Profile:
    waves: tuple[int, int]  # how many waves (inclusive range), the first at 0 s, the others
    items: tuple[int, int]  # at random times while faults come; items per wave
    faults: tuple[int, int]  # how many faults
    span: float  # faults at 1..span s after the pilot is up
    hold: tuple[float, float]  # a stop's, a cut's, a full disk's length
    sleep_max: float  # a sleep unit's longest sleep
    ranks_max: int


PROFILES = {
    "full": Profile((4, 8), (8, 24), (3, 7), 30.0, (1.0, 30.0), 3.0, 4),
    "short": Profile((2, 2), (6, 9), (2, 3), 5.0, (1.0, 3.0), 0.6, 2),
}


def _kinds() -> dict[str, float]:
    """Every kind of fault and its weight in the draw."""
    kinds = {}
    for target in TARGETS:
        weight = 0.5 if target == "bootstrap" else 1.0
        kinds[f"kill_{target}"] = weight
        kinds[f"stop_{target}"] = weight
    kinds.update(
        cut_client_link=1.0,
        cut_node_link=1.0,
        full_store_disk=1.0,
        full_sandbox_disk=1.0,
        take_over=1.0,
        reconfig_storm=1.0,
        grow_end=1.0,
    )
    return kinds


KINDS = _kinds()
HELD = {k for k in KINDS if k.startswith(("stop_", "cut_", "full_"))} | {"grow_end"}


def left_out(kind: str, resource: str, store: str, root: bool) -> str | None:
    """Why `kind` cannot be drawn for this resource, store and user, or None."""
    if kind.startswith("cut_"):
        if resource != "slurm-netns":
            return "cuts links between network namespaces: the slurm-netns resource only"
        if not root:
            return "network namespaces need root"
    if kind.endswith("node_zygote") and resource == "slurm-netns":
        return "srun starts the node daemons there: no node zygote"
    if kind.startswith("full_"):
        if not root:
            return "a tmpfs mount needs root"
        if kind == "full_store_disk" and store != "sqlite":
            return "the store is MongoDB (a full disk under the sqlite file only)"
    return None


@dataclasses.dataclass
class Fault:
    at: float  # seconds after the pilot is up
    kind: str
    hold: float | None = None  # stop / cut / full disk: how long; grow_end: after the join
    pick: int = 0  # which candidate (modulo how many there are then)
    n: int | None = None  # reconfig_storm: how many reconfigs

    def describe(self) -> str:
        more = [f"{self.hold:.1f} s" if self.hold is not None else ""]
        if self.n is not None:
            more.append(f"{self.n} reconfigs")
        return f"{self.at:6.1f} s  {self.kind:<18} {' '.join(m for m in more if m)}".rstrip()


@dataclasses.dataclass
class Item:
    kind: str  # sleep | ranks | function | staging
    sleep: float
    ranks: int = 1
    output: int = 0  # bytes to stdout (a sandbox on the small disk fills with them)


@dataclasses.dataclass
class Wave:
    at: float  # seconds after the pilot is up
    items: list[Item]


@dataclasses.dataclass
class Schedule:
    seed: int
    asked: str  # the resource as asked for: mix draws the resource from the seed
    resource: str  # local.nodes4 | slurm-netns
    profile: str
    root: bool
    store: str  # sqlite | mongodb
    nodes: int  # the pilot's first job
    max_nodes: int | None
    parts: list[int]  # nodes per initial partition
    waves: list[Wave]
    faults: list[Fault]
    left_out: dict[str, str]  # kind -> why it was not drawn

    @classmethod
    def from_seed(
        cls, seed: int, resource: str = "local.nodes4", profile: str = "full", root=None
    ) -> Schedule:
        """The plan of `seed` (see the module's header); `root` defaults to this process's."""
        root = os.geteuid() == 0 if root is None else bool(root)
        if profile not in PROFILES:
            raise ValueError(f"profile={profile!r} must be one of {sorted(PROFILES)}")
        if resource not in (*RESOURCES, "mix"):
            raise ValueError(f"resource={resource!r} must be one of {[*RESOURCES, 'mix']}")
        p = PROFILES[profile]
        rng = random.Random(f"chaos/{seed}/{resource}/{profile}")
        asked = resource
        if resource == "mix":
            resource = rng.choice(RESOURCES)
        # MongoDB (SecantusDB on this host's loopback) for some seeds: the client on a login
        # node in a namespace of its own cannot reach it there
        store = "mongodb" if resource == "local.nodes4" and rng.random() < 0.25 else "sqlite"
        kinds = {k: w for k, w in KINDS.items() if not left_out(k, resource, store, root)}
        out = {k: why for k in KINDS if (why := left_out(k, resource, store, root))}
        faults = []
        for _ in range(rng.randint(*p.faults)):
            kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
            f = Fault(at=round(rng.uniform(1.0, p.span), 1), kind=kind, pick=rng.randrange(1000))
            if kind in HELD:
                lo, hi = (2.0, 8.0) if kind == "grow_end" else p.hold
                f.hold = round(rng.uniform(lo, hi), 1)
            if kind == "reconfig_storm":
                f.n = rng.randint(4, 10)
            faults.append(f)
        faults.sort(key=lambda f: f.at)
        grow = any(f.kind == "grow_end" for f in faults)
        n = rng.randint(*p.waves)
        times = [0.0] + sorted(round(rng.uniform(0.5, p.span * 0.9), 1) for _ in range(n - 1))
        waves = []
        for at in times:
            items = [_item(rng, p, root) for _ in range(rng.randint(*p.items))]
            waves.append(Wave(at=at, items=items))
        return cls(
            seed=seed,
            asked=asked,
            resource=resource,
            profile=profile,
            root=root,
            store=store,
            # a pilot that may grow holds 3 of the 4 nodes and grows by the fourth
            nodes=3 if grow else 4,
            max_nodes=4 if grow else None,
            parts=[2, 1] if grow else [2, 1, 1],
            waves=waves,
            faults=faults,
            left_out=out,
        )

    @property
    def kinds(self) -> list[str]:
        return [f.kind for f in self.faults]

    @property
    def budget(self) -> float:
        """Seconds the seed may take from its pilot's start to its last check: generous (two
        cores, shared with other runs): a hang beyond it is a violation."""
        held = sum(f.hold or 0.0 for f in self.faults)
        return 150.0 + held + (self.waves[-1].at if self.waves else 0.0)

    def items(self) -> int:
        return sum(len(w.items) for w in self.waves)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        d = json.loads(text)
        d["waves"] = [Wave(at=w["at"], items=[Item(**i) for i in w["items"]]) for w in d["waves"]]
        d["faults"] = [Fault(**f) for f in d["faults"]]
        return cls(**d)

    def replay(self) -> str:
        """The command that runs this plan again."""
        return f"python -m tests.chaos.run --seed {self.seed} --resource {self.asked}" + (
            "" if self.profile == "full" else f" --profile {self.profile}"
        )

    def __str__(self) -> str:
        mix: dict[str, int] = {}
        for w in self.waves:
            for i in w.items:
                mix[i.kind] = mix.get(i.kind, 0) + 1
        pilot = f"nodes={self.nodes}" + (f", max_nodes={self.max_nodes}" if self.max_nodes else "")
        lines = [
            f"seed {self.seed}: {self.resource}, {self.profile} profile, store {self.store}, "
            f"{'root' if self.root else 'not root'}",
            f"  pilot: {pilot}, partitions of {self.parts} node(s)",
            f"  workload: {self.items()} units in {len(self.waves)} waves (named streams) at "
            f"{[w.at for w in self.waves]} s: "
            + ", ".join(f"{n} {k}" for k, n in sorted(mix.items())),
            "  faults (s after the pilot is up):",
            *[f"    {f.describe()}" for f in self.faults],
        ]
        if self.left_out:
            lines.append("  left out of the draw:")
            lines += [f"    {k}: {why}" for k, why in sorted(self.left_out.items())]
        lines.append(f"  replay: {self.replay()}")
        return "\n".join(lines)


def _item(rng: random.Random, p: Profile, root: bool) -> Item:
    kind = rng.choices(ITEM_KINDS, weights=(55, 15, 15, 15))[0]
    # lognormal, median 0.4 s, clipped to 0.05..sleep_max
    sleep = round(min(p.sleep_max, max(0.05, math.exp(rng.gauss(math.log(0.4), 1.0)))), 3)
    ranks = rng.randint(2, p.ranks_max) if kind == "ranks" else 1
    output = rng.choice((0, 0, 20_000, 200_000)) if kind == "sleep" and root else 0
    return Item(kind=kind, sleep=sleep, ranks=ranks, output=output)
