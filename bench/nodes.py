"""A pilot of many nodes on one box (local.sim: real node daemons, many to a process, units
simulated: agent/node/sim.py): what bring-up, units, reconfig and a node's loss cost as it
grows, and what each process spends per node and per unit.

    python bench/nodes.py [--nodes 64,256,1024,4096] [--units 200000] [--mixed] [--json FILE]
                          [--node-timeout S] [--mixed-only] [--bringup-only K]

For each size N (8 partitions of N/8 nodes, 128 cores and 8 GPUs a node; a size this machine's
memory cannot hold is skipped, as submit refuses it):
    bring-up    submit_pilots -> every partition ACTIVE, s
    rate        U units of distinct arguments (`/bin/true i`) through submit_units(list) ->
                wait_units: units/s, end to end
    reconfig    stop a partition of N/8 nodes and start two of N/16 -> both ACTIVE, s
    node loss   one node's daemon ended as kill -9 would end it (SIGUSR1 to its host, which
                reads its kill file): the first of its units FAILED, s (node_timeout 10 s + REJOIN
                3 s is the bound), and whether every unit of the other nodes ended DONE
    memory      RSS of the bootstrap, an agent, the node hosts: KB per node (the slope between
                the two smallest sizes measured is the per-node cost; the rest is the base)
    CPU         CPU time per unit of `rate`, per process kind (client, bootstrap, agents, node
                hosts), us
Ratios in the same run: each size's CPU per unit against the smallest size's (flat is 1.0); and
`placement`: a unit's placement (PartitionPool.allocate + release, the agent's) on one node of
128 cores against one on 1,024 nodes of 128 cores (131,072 cores), the same units, in this
process; and `a poll`: what a turn's poll costs an agent (one ROUTER to all its nodes, against
a DEALER a node) and a host of simulated nodes (epoll, against zmq.Poller over every socket).
--mixed (at 1,024 nodes, or the largest size if smaller): a workload that fills the pilot, 2 x
(cores) units of 1, 8 and 128 cores with lognormal `sleep` durations, submitted at once: its
makespan against the greedy list schedule on the same nodes (whenever a unit ends, every waiting
unit that fits a node starts, oldest first; a node is picked best-fit), x bound (target <=
1.05).
Targets (issue 55): bring-up at 1,024 nodes <= 3 s; rate >= 20,000 units/s; reconfig <= 0.2 s;
node loss within node_timeout (+ REJOIN); memory <= 10 KB per node held for the bootstrap and
each agent beyond its base, <= 4 GiB for every pilot process together; placement within 2 x.
"""

from __future__ import annotations

import argparse
import ast
import heapq
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import yaml  # noqa: E402

import pilot as rp  # noqa: E402
from pilot.pmgr.core import reaper  # noqa: E402

PARTS = 8
NODE_TIMEOUT = 10
CPD, CUD = rp.ComputePartitionDescription, rp.ComputeUnitDescription


# -- what processes spend -------------------------------------------------------------------------
def _stat(pid: int) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of a process; (0, 0) if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        return cpu, rss
    except (OSError, IndexError, ValueError):
        return 0.0, 0


def _kind(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            cmd = f.read()
    except OSError:
        return "?"
    for needle, kind in (("pilot.agent.node.sim", "hosts"), ("bootstrap", "bootstrap"),
                         ("agent.zygote", "agents"), ("pilot.agent", "agents")):  # fmt: skip
        if needle in cmd:
            return kind
    return "other"


def processes(session) -> dict[int, str]:
    """The session's processes by kind, and this client's own."""
    out = {pid: _kind(pid) for pid in reaper.session_processes(session.uid)}
    out[os.getpid()] = "client"
    return out


def spent(procs: dict[int, str]) -> dict[int, tuple[float, int]]:
    return {pid: _stat(pid) for pid in procs}


def rss_mb(procs: dict, stats: dict) -> dict[str, float]:
    """MiB resident by process kind, from `spent`'s stats."""
    out: Counter = Counter()
    for pid, kind in procs.items():
        out[kind] += stats.get(pid, (0.0, 0))[1]
    return {k: round(v / 2**20, 1) for k, v in out.items()}


def by_kind(procs: dict, before: dict, after: dict) -> dict[str, float]:
    out: Counter = Counter()
    for pid, kind in procs.items():
        out[kind] += after.get(pid, (0.0, 0))[0] - before.get(pid, (0.0, 0))[0]
    return dict(out)


# -- one size -------------------------------------------------------------------------------------
def sim_config(tmp: str, node_timeout: float = NODE_TIMEOUT) -> str:
    with open(os.path.join(ROOT, "configs", "local.yaml")) as f:
        cfg = yaml.safe_load(f)["sim"]
    # (a host runs 256 daemons on a shared core: under a burst of units it answers their
    # pulses late; 3 s lost live nodes at 200,000 units, 10 s never did)
    cfg["node_timeout"] = node_timeout
    path = os.path.join(tmp, "sim.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def sim_pilot(session, resource: str, n: int, runtime: float):
    """A pilot of n simulated nodes in PARTS partitions, every one ACTIVE; (pilot, its umgr)."""
    pd = rp.ComputePilotDescription(
        resource=resource, nodes=n, runtime=runtime, parts=[CPD(nodes=n // PARTS)] * PARTS
    )
    pilot = rp.PilotManager(session).submit_pilots(pd)
    for part in pilot.partitions:
        assert part.wait(rp.ACTIVE, timeout=300) == rp.ACTIVE, part.reason
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    return pilot, umgr


def bringup(n: int, resource: str) -> dict:
    """One bring-up of n nodes: submit -> every partition ACTIVE, s, and the bootstrap's own
    phases from its log (`boot.nodes.table`: up_s, table_s)."""
    t0 = time.monotonic()
    with rp.Session() as session:
        pilot, _ = sim_pilot(session, resource, n, runtime=30)
        took = time.monotonic() - t0
        time.sleep(2)  # (settled: pulses flowing, nothing in flight)
        procs = processes(session)
        held = rss_mb(procs, spent(procs))
        with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
            line = next((x for x in f if "boot.nodes.table:" in x), "")
    stats: dict = {"idle_rss_mb": held}
    if line:
        stats |= ast.literal_eval(line.split("boot.nodes.table: ", 1)[1].strip())
    return {"nodes": n, "bringup_s": round(took, 2), **{k: stats.get(k) for k in PHASES}}


FLOOR_CONNS = 1000


def zmq_floor() -> float:
    """KB a CURVE ROUTER holds per accepted connection, idle (its peers in a child process):
    libzmq's floor under every per-node connection the bootstrap and the agents hold."""
    import zmq

    pub, sec = zmq.curve_keypair()
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.curve_server, router.curve_secretkey, router.curve_publickey = True, sec, pub
    port = router.bind_to_random_port("tcp://127.0.0.1")
    pid = os.fork()
    if pid == 0:  # (the peers: their memory is not this process's)
        try:
            peers = zmq.Context()
            for _ in range(FLOOR_CONNS):
                d = peers.socket(zmq.DEALER)
                d.curve_publickey, d.curve_secretkey = zmq.curve_keypair()
                d.curve_serverkey = pub
                d.connect(f"tcp://127.0.0.1:{port}")
                d.send(b"hi")
            time.sleep(5)
        finally:
            os._exit(0)
    try:
        before = _stat(os.getpid())[1]
        router.rcvtimeo = 30_000
        for _ in range(FLOOR_CONNS):
            router.recv_multipart()
        time.sleep(0.3)
        return (_stat(os.getpid())[1] - before) / FLOOR_CONNS / 1024
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        router.close(linger=0)
        ctx.term()


PHASES = ("up_s", "table_s", "fanout", "tree_depth", "idle_rss_mb")


def one_size(n: int, units: int, resource: str) -> dict:
    row: dict = {"nodes": n}
    t0 = time.monotonic()
    with rp.Session() as session:
        pilot, umgr = sim_pilot(session, resource, n, runtime=30)
        row["bringup_s"] = round(time.monotonic() - t0, 2)
        descs = [CUD(executable="/bin/true", arguments=[str(i)]) for i in range(units)]
        procs = processes(session)
        before = spent(procs)
        t1 = time.monotonic()
        done = umgr.submit_units(descs)
        umgr.wait_units(timeout=3600)
        took = time.monotonic() - t1
        after = spent(procs)
        states = Counter(u.state for u in done)
        why = Counter(u.reason for u in done if u.state != rp.DONE)
        row["not_done"] = units - states[rp.DONE]  # (a live node lost under load: its units)
        if row["not_done"]:
            print(f"{n} nodes: {dict(states)}: {why.most_common(2)}", file=sys.stderr)
        row["rate"] = round(units / took)
        cpu = by_kind(procs, before, after)
        row["cpu_us"] = {k: round(1e6 * v / units, 1) for k, v in cpu.items()}
        row["rss_mb"] = rss_mb(procs, after)
        row["procs"] = dict(Counter(procs.values()))
        row["lost_under_load"] = len(lost_nodes(pilot))  # (live nodes lost for silence)
        row["reconfig_s"] = reconfig(pilot)
        row["node_loss_s"], row["others_done"] = node_loss(pilot, umgr, session)
    return row


def lost_nodes(pilot) -> set[str]:
    """The nodes the bootstrap lost so far (node.lost in its log)."""
    with open(os.path.join(pilot.sandbox, "bootstrap.log")) as f:
        return {ln.split("node.lost: node ")[1].split()[0] for ln in f if "node.lost: node " in ln}


def reconfig(pilot) -> float:
    lost = lost_nodes(pilot)
    live = [p for p in pilot.partitions if p.state == rp.ACTIVE]
    names = {p.uid: {n["name"] for n in (p.resources or {}).get("nodes") or ()} for p in live}
    victim = min(live, key=lambda p: len(names[p.uid] & lost))  # (one that lost none, if any)
    nodes = len(names[victim.uid] - lost) or 2
    t0 = time.monotonic()
    new = pilot.reconfig(stop=victim.uid, start=[CPD(nodes=nodes // 2), CPD(nodes=nodes // 2)])
    for p in new:
        assert p.wait(rp.ACTIVE, timeout=60) == rp.ACTIVE, p.reason
    return round(time.monotonic() - t0, 3)


def node_loss(pilot, umgr, session) -> tuple[float, bool]:
    """A `sleep 20` on every core of every node; one node's daemon killed: how long until its
    units end FAILED, and whether all the others end DONE (canceled after: nothing waits 20 s)."""
    live = [p for p in pilot.partitions if p.state == rp.ACTIVE]
    n = sum(len((p.resources or {}).get("nodes") or ()) for p in live)
    units = umgr.submit_units([CUD(executable="sleep", arguments=["20"], cores=128)] * n)
    umgr.wait_units([u.uid for u in units], state=rp.EXECUTING, timeout=120)
    victim = units[len(units) // 2].node
    hint = next(int(i) for i, d in pilot.nodes.items() if d["name"] == victim)
    from pilot.partition.launch.sim import PER_HOST

    host = hint // PER_HOST
    path = os.path.join(pilot.sandbox, "nodes", f"sim.{host}.json")
    with open(path + ".kill", "w") as f:
        json.dump([hint], f)
    pids = [p for p in reaper.session_processes(session.uid) if _kind(p) == "hosts"]
    mine = [p for p in pids if f"sim.{host}.json" in open(f"/proc/{p}/cmdline").read()]
    t0 = time.monotonic()
    os.kill(mine[0], signal.SIGUSR1)
    hit = [u for u in units if u.node == victim]
    deadline = time.monotonic() + 60
    while not all(u.final for u in hit) and time.monotonic() < deadline:
        time.sleep(0.05)
    took = round(time.monotonic() - t0, 2)
    others = [u for u in units if u.node != victim]
    ok = all(u.state == rp.FAILED for u in hit) and not any(u.final for u in others)
    if not ok:
        ended = [(u.uid, u.node, u.state, u.reason) for u in others if u.final][:3]
        print(f"node loss: {Counter(u.state for u in hit)} on the lost node, others "
              f"{Counter(u.state for u in others)}: {ended}", file=sys.stderr)  # fmt: skip
    umgr.cancel_units([u.uid for u in others])
    umgr.wait_units(timeout=120)
    return took, ok


# -- placement at two sizes, in this process ------------------------------------------------------
def placement(reps: int = 20_000) -> dict:
    from pilot.agent.pool import PartitionPool

    def pool(nodes: int) -> PartitionPool:
        return PartitionPool(
            [
                {"index": i, "name": f"n{i}", "cores": list(range(128)), "gpus": list(range(8))}
                for i in range(nodes)
            ]  # fmt: skip
        )

    out = {}
    rng = random.Random(55)
    shapes = [{"cpus": rng.choice((1, 1, 1, 8)), "ranks": 1} for _ in range(reps)]
    for nodes in (1, 1024):
        p = pool(nodes)
        held: list = []
        t0 = time.perf_counter()
        for req in shapes:
            a = p.allocate(req)
            if a is None or len(held) >= 64:  # (a steady state: some held, some freed)
                while held:
                    p.release(held.pop().aid)
                a = a or p.allocate(req)
            held.append(a)
        out[nodes] = 1e6 * (time.perf_counter() - t0) / reps
    return {"one_node_us": round(out[1], 2), "1024_nodes_us": round(out[1024], 2),
            "x": round(out[1024] / out[1], 2)}  # fmt: skip


# -- what a turn's poll costs as nodes grow, in this process --------------------------------------
def polls(turns: int = 2_000) -> dict:
    """An agent's poll of its nodes' connections (DaemonRunner: one ROUTER to all of them) against
    a DEALER a node, as it was; a host's poll of its daemons' sockets (HostPoller) against
    zmq.Poller over all of them: us a poll with nothing to read, at 128 and 512 nodes (a 1,024-
    and a 4,096-node pilot's partitions of an eighth) and 256 and 1,024 sockets (a host holds
    256 daemons of 3 sockets)."""
    import zmq

    from pilot.agent.node.sim import HostPoller

    def per_poll(poller) -> float:
        t0 = time.perf_counter()
        for _ in range(turns):
            poller.poll(0)
        return 1e6 * (time.perf_counter() - t0) / turns

    out: dict = {}
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 4096)
    ctx.setsockopt(zmq.LINGER, 0)
    made: list = []
    try:
        for n in (128, 512):
            servers = [ctx.socket(zmq.ROUTER) for _ in range(n)]
            made += servers
            ends = [f"tcp://127.0.0.1:{s.bind_to_random_port('tcp://127.0.0.1')}" for s in servers]
            router = ctx.socket(zmq.ROUTER)
            made.append(router)
            for i, end in enumerate(ends):
                router.setsockopt(zmq.CONNECT_ROUTING_ID, b"%d" % i)
                router.connect(end)
            dealers = [ctx.socket(zmq.DEALER) for _ in ends]
            made += dealers
            for d, end in zip(dealers, ends):
                d.connect(end)
            one, each = zmq.Poller(), zmq.Poller()
            one.register(router, zmq.POLLIN)
            for d in dealers:
                each.register(d, zmq.POLLIN)
            host, flat = HostPoller(), zmq.Poller()
            for s in dealers + servers:  # (sockets of a host's daemons: 3 a node, here 2)
                host.register(s, zmq.POLLIN)
                flat.register(s, zmq.POLLIN)
            host.poll(0)  # (registered sockets are asked once)
            out[n] = {
                "agent_one_router_us": round(per_poll(one), 2),
                "agent_dealer_a_node_us": round(per_poll(each), 2),
                "host_epoll_us": round(per_poll(host), 2),
                "host_zmq_poll_us": round(per_poll(flat), 2),
            }
    finally:
        for s in made:
            s.close(0)
        ctx.term()
    return out


# -- the mixed workload and its greedy bound ------------------------------------------------------
def mixed_units(cores: int, seed: int = 55) -> list[tuple[int, float]]:
    """2 x `cores` units of 1, 8 and 128 cores, lognormal durations (median 1 s, sigma 0.5)."""
    rng = random.Random(seed)
    widths = rng.choices((1, 8, 128), weights=(70, 25, 5), k=2 * cores)
    return [(w, round(min(8.0, rng.lognormvariate(0.0, 0.5)), 3)) for w in widths]


def greedy_nodes(units: list[tuple[int, float]], nodes: int, per_node: int) -> float:
    """The greedy list schedule's makespan on `nodes` nodes of `per_node` cores: whenever a unit
    ends, every waiting unit that fits a node starts, oldest first, on the fullest node that
    fits (the agent's BLOCK)."""
    free = [per_node] * nodes
    buckets = [set() for _ in range(per_node + 1)]
    buckets[per_node] = set(range(nodes))
    queues = {w: [] for w in {w for w, _ in units}}
    for i, (w, _) in enumerate(units):
        queues[w].append(i)
    heads = {w: 0 for w in queues}
    running: list = []
    t = end = 0.0

    def fit(w: int):
        for c in range(w, per_node + 1):
            if buckets[c]:
                return next(iter(buckets[c]))
        return None

    while True:
        while True:  # the oldest waiting unit that fits, again and again
            best = None
            for w, q in queues.items():
                h = heads[w]
                if h < len(q) and (best is None or q[h] < best[1]) and fit(w) is not None:
                    best = (w, q[h])
            if best is None:
                break
            w, i = best
            heads[w] += 1
            node = fit(w)
            buckets[free[node]].discard(node)
            free[node] -= w
            buckets[free[node]].add(node)
            done = t + units[i][1]
            end = max(end, done)
            heapq.heappush(running, (done, node, w))
        if not running:
            return end
        t, node, w = heapq.heappop(running)
        buckets[free[node]].discard(node)
        free[node] += w
        buckets[free[node]].add(node)


def mixed(n: int, resource: str) -> dict:
    units = mixed_units(n * 128)
    with rp.Session() as session:
        pilot, umgr = sim_pilot(session, resource, n, runtime=60)
        descs = [CUD(executable="sleep", arguments=[f"{d:g}"], cores=w) for w, d in units]
        t0 = time.time()
        done = umgr.submit_units(descs)
        umgr.wait_units(timeout=3600)
        states = Counter(u.state for u in done)
        why = Counter(u.reason.split(":")[0] for u in done if u.state != rp.DONE)
        first = min(ts for u in done for s, ts in u.history if s == rp.EXECUTING)
        last = max(ts for u in done for s, ts in u.history if s == rp.DONE)
    bound = greedy_nodes(units, n, 128)
    return {
        "units": len(units),
        "states": dict(states),
        "not_done_why": dict(why.most_common(3)),
        "makespan_s": round(last - t0, 2),
        "start_s": round(first - t0, 2),
        "bound_s": round(bound, 2),
        "x_bound": round((last - first) / bound, 3),
    }


def fits(n: int) -> bool:
    from pilot.partition.launch.sim import memory_estimate
    from pilot.partition.plan import _available_memory

    have = _available_memory()
    return have is None or memory_estimate(n, PARTS) <= 0.8 * have


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="64,256,1024,4096")
    ap.add_argument("--units", type=int, default=200_000)
    ap.add_argument("--mixed", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--node-timeout",
        type=float,
        default=NODE_TIMEOUT,
        help=f"the simulated resource's node_timeout, s (default {NODE_TIMEOUT})",
    )
    ap.add_argument("--mixed-only", action="store_true", help="--mixed at the largest --nodes")
    ap.add_argument(
        "--bringup-only",
        type=int,
        metavar="K",
        help="only bring-up, K times at each size: submit -> all ACTIVE, and the bootstrap's "
        "own phases (daemons up, the channel table)",
    )
    ap.add_argument("--zmq-floor", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.zmq_floor:
        print(f"{zmq_floor():.1f}")
        return 0
    sizes = [int(x) for x in args.nodes.split(",")]
    tmp = tempfile.mkdtemp(prefix="bench-nodes-")
    os.environ.setdefault("PILOT_SESSIONS_DIR", os.path.join(tmp, "sessions"))
    resource = sim_config(tmp, args.node_timeout)
    rows = []
    if args.bringup_only:
        held = {}
        for n in sizes:
            for _ in range(args.bringup_only):
                row = bringup(n, resource)
                held[n] = row["idle_rss_mb"]
                print(json.dumps(row), flush=True)
        if len(held) >= 2:
            a, b = min(held), max(held)
            for kind in ("bootstrap", "agents", "hosts"):
                per = (held[b][kind] - held[a][kind]) * 2**20 / (b - a) / 1024
                print(f"memory held idle per node, {kind}: {per:.1f} KB", flush=True)
            floor = subprocess.run(  # (a fresh process: no freed heap to reuse)
                [sys.executable, __file__, "--zmq-floor"], capture_output=True, text=True,
                timeout=120, check=True).stdout.strip()  # fmt: skip
            print(f"a ZeroMQ connection held idle (one CURVE ROUTER, {FLOOR_CONNS} peers, a "
                  f"fresh process): {floor} KB", flush=True)  # fmt: skip
        return 0
    if args.mixed_only:
        m = mixed(max(sizes), resource)
        print(json.dumps(m))
        return 0 if m["states"] == {rp.DONE: m["units"]} else 1
    for n in sizes:
        if not fits(n):
            print(f"{n} nodes: skipped, this machine's memory cannot hold them", flush=True)
            continue
        units = min(args.units, max(20_000, args.units * n // max(sizes)))
        rows.append(one_size(n, units, resource))
        print(json.dumps(rows[-1]), flush=True)
    place = placement()
    print("\nnodes  bring-up  units/s  reconfig  node loss  RSS MiB (client/boot/agents/hosts)"
          "  CPU us/unit (client/boot/agents/hosts)  x smallest")  # fmt: skip
    base = None
    for r in rows:
        cpu, rss = r["cpu_us"], r["rss_mb"]
        total = sum(cpu.values())
        base = base or total
        kinds = ("client", "bootstrap", "agents", "hosts")
        print(
            f"{r['nodes']:>5}  {r['bringup_s']:>7.2f}s  {r['rate']:>7}  {r['reconfig_s']:>7.3f}s"
            f"  {r['node_loss_s']:>6.2f}s{'' if r['others_done'] else '!'}"
            f"{f' ({lost} lost under load)' if (lost := r['lost_under_load']) else ''}"
            f"{f' ({bad} units not DONE)' if (bad := r['not_done']) else ''}"
            f"  {'/'.join(str(rss.get(k, 0)) for k in kinds):>28}"
            f"  {'/'.join(str(cpu.get(k, 0)) for k in kinds):>30}  {total / base:.2f}"
        )
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]  # (the slope over the widest span)
        for kind in ("bootstrap", "agents"):
            per = (b["rss_mb"][kind] - a["rss_mb"][kind]) * 2**20 / (b["nodes"] - a["nodes"])
            print(f"memory per node, {kind}: {per / 1024:.1f} KB (all of its processes)")
        per = (b["rss_mb"]["hosts"] - a["rss_mb"]["hosts"]) * 2**20 / (b["nodes"] - a["nodes"])
        print(f"memory per simulated node, its host: {per / 1024:.1f} KB")
    print(f"placement: one node {place['one_node_us']} us a unit, 1,024 nodes "
          f"{place['1024_nodes_us']} us: x {place['x']}")  # fmt: skip
    turns = polls()
    for n, p in turns.items():
        print(
            f"a poll, {n} nodes: agent {p['agent_one_router_us']} us (a DEALER a node: "
            f"{p['agent_dealer_a_node_us']} us); a host, {2 * n} sockets: "
            f"{p['host_epoll_us']} us (zmq.Poller over all: {p['host_zmq_poll_us']} us)"
        )
    result = {"sizes": rows, "placement": place, "polls": turns}
    if args.mixed and rows:
        at = min(max(r["nodes"] for r in rows), 1024)  # (the size: 262,144 units)
        result["mixed"] = mixed(at, resource)
        m = result["mixed"]
        print(f"mixed at {at} nodes: {m['units']} units, makespan "
              f"{m['makespan_s']} s (start {m['start_s']} s), greedy bound {m['bound_s']} s: "
              f"x {m['x_bound']}; {m['states']} {m['not_done_why'] or ''}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
