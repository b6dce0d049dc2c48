"""One Snakemake workflow on one SLURM cluster, twice: snakemake-executor-plugin-slurm (one batch
job per rule instance) against `snakemake --executor pilot` (one pilot job, plus the jobs it
grows by).  Issue 57, item 3.

    sudo .venv/bin/python bench/snakemake_slurm.py [-n 300] [--jobs 100] [--pilot-nodes 4]
        [--pilot-max-nodes M] [--runs slurm,pilot] [--layout netns|host] [--keep-cluster]
    .venv/bin/python bench/snakemake_slurm.py --dry-run    the workflow and `snakemake -n` only
    .venv/bin/python bench/snakemake_slurm.py --generate DIR    write the workflow to DIR only

The workflow (written to a temporary directory, the same one for both runs: same seed, same
Snakefile): N rule instances, N-1 independent jobs that `sleep` 0.5 to 3 s (lognormal, median
1.2 s, clipped; seeded), about one in seven of them with `threads: 2`, and a gather job at the
end that reads every output (the default target, so no local `all` job: N jobs are submitted).
Every output names the host its job ran on.  Both runs get the same `--jobs` and
`--default-resources runtime=... mem_mb=...`.

  (a) slurm   `snakemake --executor slurm --slurm-status-command squeue
              --default-resources slurm_partition=debug ...`: the official plugin
              (snakemake-executor-plugin-slurm, as installed).  `squeue` because tests/slurm.sh's
              cluster has no accounting (AccountingStorageType=accounting_storage/none: `sacct`
              exists but cannot answer; MinJobAge=300 keeps ended jobs in squeue); no account (the
              plugin's guess via sacct finds none and it submits without); its status-check
              interval is its own default (40 s; `--slurm-status-interval S` sets
              --slurm-init-seconds-before-status-checks)
              (and its job step plugin, which strips SLURM_CONF before its inner srun: the
              cluster's config is linked at SLURM's default path, /etc/slurm/slurm.conf, while
              the runs last, as a site has it, when nothing is there)
  (b) pilot   `snakemake --executor pilot --pilot-resource slurm-bench.yaml --pilot-nodes K
              [--pilot-max-nodes M]` (a copy of configs/slurm.yaml's localhost with the
              cluster's nodes and CPUs, and a site's queue poll interval, 30 s, not the test
              config's 1 s: --pilot-poll-interval)

Measured for each, on the same cluster:

  makespan     wall time of the `snakemake` command (start to exit)
  SLURM jobs   `sdiag`'s "Jobs submitted" counter, after minus before; cross-checked against the
               job ids slurmctld logs (`_slurm_rpc_submit_batch_job: JobId=N` in its log, the
               bytes written during the run), which count instead when sdiag's counters were
               reset during the run (its "Data since" changed: midnight UTC, a restart).  No
               sacct: the cluster keeps no accounting.
  RPCs         slurmctld's RPC counts by message type (`sdiag`, "Remote Procedure Call statistics
               by message type"), after minus before, summed; REQUEST_STATS_INFO (sdiag's own
               message) left out.  "After" is taken --settle seconds after snakemake exits, so
               the ends of the last jobs (a pilot's teardown, the slurmds' completion messages)
               are in; the count at exit is kept in the JSON too.  Everything that talks to
               slurmctld is counted: sbatch, squeue polls (the slurm plugin's status checks,
               PSI/J's queue polls for the pilot), srun job steps, the slurmds' messages, and
               the `scontrol show config` that the slurm plugin runs when Snakemake imports it
               (Snakemake imports every installed executor plugin in every Snakemake process,
               each job's too: its REQUEST_BUILD_INFO is in both rows, shown apart below).
               The cluster's idle rate (RPCs/s over --settle seconds before the first run) is
               printed beside.  No `sdiag -r`: counters are never reset, only differenced.

Prints a markdown table (rows: the two plugins; columns: makespan, SLURM jobs, RPCs, and each of
them pilot / slurm) and the RPC types that differ most; writes everything to
bench/results/snakemake_slurm.json (bench/results/ is not tracked).

The cluster: tests/slurm.sh's, by default its network-namespace layout (PILOT_SLURM_NETNS=1:
slurmctld and the clients in namespace <tag>login, compute node K in <tag>nodeK), with a tag and
directory of its own (`sb`, /tmp/pilot-smbench-slurm) so that tests/test_cluster.py's (`pc`)
and the fault campaign's (`cx`) may run beside it; --nodes (4) nodes of --cpus (2) CPUs.
Snakemake, sdiag and squeue run in the login namespace (nsenter), as a user on a login node
would.  If that cluster is not up, the script brings it up (`tests/slurm.sh up`) and down again
at the end (`tests/slurm.sh down`; --keep-cluster leaves it up); one it found up it leaves up.
Needs root (tests/slurm.sh does).  Before each run it waits (--drain-timeout) until the
cluster has no job left, and refuses to go on while one is (another's jobs would be counted).
munged is shared by every tests/slurm.sh cluster: one this script's `up` started, its `down`
stops, so do not start another cluster while this one is up and then let this one go down.
Each run has its own copy of the workflow (<workdir>/slurm, <workdir>/pilot); the work
directory is removed at the end unless --keep-workdir (or a run failed: its snakemake.log is
there).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLURM_SH = os.path.join(ROOT, "tests", "slurm.sh")
RESULTS = os.path.join(ROOT, "bench", "results", "snakemake_slurm.json")
RUNS = ("slurm", "pilot")
LABELS = {"slurm": "official slurm plugin", "pilot": "pilot plugin"}
SELF_RPC = "REQUEST_STATS_INFO"  # sdiag's own request: ours, not the plugins'
BUILD_INFO = "REQUEST_BUILD_INFO"  # `scontrol show config`

# ---------------------------------------------------------------- the workflow


@dataclass(frozen=True)
class Job:
    i: int
    seconds: float
    threads: int


def plan(n: int, seed: int, wide_every: int = 7, median: float = 1.2) -> list[Job]:
    """N-1 sleeping jobs (the gather job is the N-th): lognormal durations around `median`
    seconds clipped to [0.5, 3], about one in `wide_every` with threads: 2; seeded."""
    if n < 2:
        raise ValueError(f"n={n}: a workflow needs at least one job besides the gather")
    rng = random.Random(seed)
    jobs = []
    for i in range(n - 1):
        s = min(3.0, max(0.5, rng.lognormvariate(math.log(median), 0.5)))
        threads = 2 if rng.random() < 1.0 / wide_every else 1
        jobs.append(Job(i, round(s, 2), threads))
    return jobs


def snakefile(jobs: list[Job]) -> str:
    narrow = [j for j in jobs if j.threads == 1]
    wide = [j for j in jobs if j.threads > 1]
    seconds = ", ".join(f"{j.i}: {j.seconds}" for j in jobs)
    return f"""# written by bench/snakemake_slurm.py: {len(jobs) + 1} rule instances
SECONDS = {{{seconds}}}
NARROW = {[j.i for j in narrow]}
WIDE = {[j.i for j in wide]}


rule gather:
    input:
        expand("out/one/{{i}}.txt", i=NARROW),
        expand("out/two/{{i}}.txt", i=WIDE),
    output:
        "gather.txt",
    shell:
        "cat {{input}} > {{output}}"


rule one:
    output:
        "out/one/{{i}}.txt",
    params:
        s=lambda wc: SECONDS[int(wc.i)],
    threads: 1
    shell:
        "sleep {{params.s}} && echo {{wildcards.i}} $(hostname) > {{output}}"


rule two:
    output:
        "out/two/{{i}}.txt",
    params:
        s=lambda wc: SECONDS[int(wc.i)],
    threads: 2
    shell:
        "sleep {{params.s}} && echo {{wildcards.i}} $(hostname) > {{output}}"
"""


def write_workflow(where: str, n: int, seed: int) -> dict:
    jobs = plan(n, seed)
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, "Snakefile"), "w") as f:
        f.write(snakefile(jobs))
    secs = sorted(j.seconds for j in jobs)
    return {
        "instances": n,
        "sleepers": len(jobs),
        "threads2": sum(j.threads > 1 for j in jobs),
        "sleep_s": {
            "sum": round(sum(secs), 2),
            "min": secs[0],
            "median": secs[len(secs) // 2],
            "max": secs[-1],
        },
        "core_s": round(sum(j.seconds * j.threads for j in jobs), 2),
    }


def check_outputs(where: str, sleepers: int) -> dict:
    """The gather output's lines (one per sleeping job) and the hosts the jobs ran on."""
    path = os.path.join(where, "gather.txt")
    if not os.path.exists(path):
        return {"complete": False, "lines": 0, "hosts": {}}
    hosts: dict[str, int] = {}
    with open(path) as f:
        lines = [line.split() for line in f if line.strip()]
    for parts in lines:
        host = parts[1] if len(parts) > 1 else "?"
        hosts[host] = hosts.get(host, 0) + 1
    return {"complete": len(lines) == sleepers, "lines": len(lines), "hosts": hosts}


# ---------------------------------------------------------------- sdiag and slurmctld's log


@dataclass
class Diag:
    since: str = ""
    jobs_submitted: int | None = None
    rpc: dict[str, int] = field(default_factory=dict)


RPC_LINE = re.compile(r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)")


def parse_sdiag(text: str) -> Diag:
    d = Diag()
    section = ""
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("Data since"):
            d.since = s[len("Data since") :].strip()
        elif s.startswith("Jobs submitted:"):
            d.jobs_submitted = int(s.split(":", 1)[1])
        elif s.startswith("Remote Procedure Call statistics by message type"):
            section = "type"
        elif s.startswith("Remote Procedure Call statistics by user") or s.startswith("Pending"):
            section = ""
        elif section == "type" and (m := RPC_LINE.match(line)):
            d.rpc[m.group(1)] = int(m.group(2))
    return d


def rpc_delta(before: Diag, after: Diag) -> tuple[dict[str, int], bool]:
    """Counts by message type, after minus before, without sdiag's own; and whether a counter
    went down (slurmctld restarted or someone ran `sdiag -r`: the deltas are then too low)."""
    delta, reset = {}, False
    for name, count in after.rpc.items():
        d = count - before.rpc.get(name, 0)
        if d < 0:
            reset, d = True, count
        if d and name != SELF_RPC:
            delta[name] = d
    return dict(sorted(delta.items(), key=lambda kv: -kv[1])), reset


SUBMIT_LINE = re.compile(r"_slurm_rpc_(?:submit_batch_job|allocate_resources):? JobId=(\d+)")


def submitted_ids(log_text: str) -> list[int]:
    return sorted({int(m.group(1)) for m in SUBMIT_LINE.finditer(log_text)})


# ---------------------------------------------------------------- the cluster


class Cluster:
    """tests/slurm.sh's cluster with this bench's tag and directory; clients in its login
    namespace (netns layout) or on this host (host layout)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.netns = args.layout == "netns"
        self.tag = args.tag
        self.dir = args.slurm_dir or (
            "/tmp/pilot-smbench-slurm" if self.netns else "/tmp/pilot-slurm"
        )
        self.nodes, self.cpus = args.nodes, args.cpus
        self.env = dict(
            os.environ,
            PILOT_SLURM_NETNS="1" if self.netns else "",
            PILOT_SLURM_TAG=self.tag,
            PILOT_SLURM_DIR=self.dir,
            PILOT_SLURM_NODES=str(self.nodes),
            PILOT_SLURM_CPUS=str(self.cpus),
        )
        self.conf = os.path.join(self.dir, "etc", "slurm.conf")
        self.log = os.path.join(self.dir, "log", "slurmctld.log")
        self.brought_up = False

    def _script(self, verb: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", SLURM_SH, verb], capture_output=True, text=True, timeout=timeout,
            env=self.env,
        )  # fmt: skip

    def up(self) -> None:
        """Up if it is not; refuse a running one of another size (restarting it is not ours
        to do)."""
        if self._script("status", 60).returncode == 0:
            with open(os.path.join(self.dir, "nodes")) as f:
                have = int(f.read().strip())
            if have != self.nodes:
                raise SystemExit(
                    f"the cluster in {self.dir} is up with {have} nodes, not --nodes "
                    f"{self.nodes}: give --nodes {have}, or another --slurm-dir and --tag"
                )
            print(f"cluster in {self.dir} already up: left up at the end", file=sys.stderr)
            return
        print(f"bringing up {self.nodes} nodes in {self.dir} (tests/slurm.sh up)", file=sys.stderr)
        out = self._script("up")
        if out.returncode != 0:
            raise SystemExit(f"tests/slurm.sh up failed:\n{out.stderr[-3000:]}")
        self.brought_up = True
        exports = dict(
            line[len("export ") :].split("=", 1)
            for line in out.stdout.splitlines()
            if line.startswith("export ")
        )
        self.conf = exports.get("SLURM_CONF", self.conf)

    def down(self) -> None:
        out = self._script("down", 300)
        if out.returncode != 0:
            print(
                f"tests/slurm.sh down: rc {out.returncode}\n{out.stderr[-2000:]}", file=sys.stderr
            )

    def client_env(self, extra: dict | None = None) -> dict:
        env = dict(os.environ, SLURM_CONF=self.conf)
        env.update(extra or {})
        return env

    def wrap(self, argv: list[str]) -> list[str]:
        """argv run where the cluster's clients run (nsenter execs it)."""
        if not self.netns:
            return list(argv)
        return ["nsenter", f"--net=/run/netns/{self.tag}login", *argv]

    def run(self, *argv: str, timeout: float = 30) -> str:
        out = subprocess.run(
            self.wrap(list(argv)), capture_output=True, text=True, timeout=timeout,
            env=self.client_env(),
        )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: rc {out.returncode}: {out.stderr.strip()}")
        return out.stdout

    def sdiag(self) -> Diag:
        d = parse_sdiag(self.run("sdiag"))
        if not d.rpc:
            raise RuntimeError("sdiag printed no RPC statistics")
        return d

    def queue(self) -> list[str]:
        out = self.run("squeue", "-h", "-t", "PD,R,CG,S,CF", "-o", "%i %j %T")
        return [line.strip() for line in out.splitlines() if line.strip()]

    def drain(self, timeout: float) -> list[str]:
        """Wait until no job is left (pending, running, completing); what is left then."""
        deadline = time.monotonic() + timeout
        while (left := self.queue()) and time.monotonic() < deadline:
            time.sleep(1.0)
        return left

    def log_offset(self) -> int:
        try:
            return os.path.getsize(self.log)
        except OSError:
            return -1

    def log_since(self, offset: int) -> str:
        if offset < 0:
            return ""
        with open(self.log, errors="replace") as f:
            f.seek(offset)
            return f.read()

    def partition(self) -> str:
        """The default partition (sinfo marks it with *)."""
        for name in self.run("sinfo", "-h", "-o", "%P").split():
            if name.endswith("*"):
                return name[:-1]
        return "debug"


# ---------------------------------------------------------------- the runs


def pilot_resource(args: argparse.Namespace, where: str) -> str:
    """A copy of slurm.localhost (configs/slurm.yaml) with the cluster's nodes and CPUs and
    the queue poll interval a site would use (--pilot-poll-interval; the test config's 1 s
    would count 30 times the squeue RPCs a user's pilot makes)."""
    with open(os.path.join(ROOT, "configs", "slurm.yaml")) as f:
        cfg = yaml.safe_load(f)["localhost"]
    path = os.path.join(where, "slurm-bench.yaml")
    cfg = dict(cfg, nodes=args.nodes, cores_per_node=args.cpus)
    cfg["queue_poll_interval"] = args.pilot_poll_interval
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


DEFAULT_CONF = "/etc/slurm/slurm.conf"


@contextlib.contextmanager
def default_config(conf: str):
    """The cluster's config at SLURM's default path while the runs last, when none is there
    (a link, removed after; one found there is left alone and must be this cluster's).  The
    slurm plugin's job step (snakemake-executor-plugin-slurm-jobstep) removes every SLURM_*
    variable but the job's ids before its inner `srun`, SLURM_CONF with them: on a site srun
    then reads the default path, and here it must find the same."""
    made = False
    if not os.path.lexists(DEFAULT_CONF):
        os.makedirs(os.path.dirname(DEFAULT_CONF), exist_ok=True)
        os.symlink(conf, DEFAULT_CONF)
        made = True
    elif os.path.realpath(DEFAULT_CONF) != os.path.realpath(conf):
        print(f"warning: {DEFAULT_CONF} is another cluster's: the slurm run's srun reads it",
              file=sys.stderr)  # fmt: skip
    try:
        yield made
    finally:
        if made and os.path.islink(DEFAULT_CONF) and os.readlink(DEFAULT_CONF) == conf:
            os.unlink(DEFAULT_CONF)


def snakemake_argv(kind: str, args: argparse.Namespace, where: str, partition: str) -> list[str]:
    resources = [f"runtime={args.runtime}", f"mem_mb={args.mem_mb}"]
    if kind == "slurm":
        resources.append(f"slurm_partition={partition}")
    argv = [
        sys.executable, "-m", "snakemake", "--snakefile", os.path.join(where, "Snakefile"),
        "--directory", where, "--jobs", str(args.jobs), "--latency-wait", "30",
        "--default-resources", *resources,
    ]  # fmt: skip
    if kind == "slurm":
        argv += ["--executor", "slurm", "--slurm-status-command", "squeue"]
        if args.slurm_status_interval is not None:
            argv += ["--slurm-init-seconds-before-status-checks", str(args.slurm_status_interval)]
    else:
        argv += [
            "--executor", "pilot", "--pilot-resource", pilot_resource(args, where),
            "--pilot-nodes", str(args.pilot_nodes), "--pilot-runtime", str(args.pilot_runtime),
        ]  # fmt: skip
        if args.pilot_max_nodes:
            argv += ["--pilot-max-nodes", str(args.pilot_max_nodes)]
    return argv + list(args.snakemake_arg or [])


def run_snakemake(argv: list[str], env: dict, log_path: str, timeout: float) -> tuple[int, float]:
    """argv in its own process group, output to log_path; (exit status, wall seconds).  Past
    `timeout`: SIGINT (Snakemake cancels its jobs), SIGKILL of the group 60 s later."""
    with open(log_path, "w") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = -1
        return rc, time.monotonic() - t0


def measure(kind: str, cluster: Cluster, args: argparse.Namespace, top: str, n: int) -> dict:
    where = os.path.join(top, kind)
    wf = write_workflow(where, n, args.seed)
    argv = snakemake_argv(kind, args, where, args.partition)
    env = cluster.client_env(
        {
            "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
            "PILOT_SESSIONS_DIR": os.path.join(where, "sessions"),
        }
    )
    left = cluster.drain(args.drain_timeout)
    if left:
        raise SystemExit(f"jobs on the cluster before the {kind} run (not ours?): {left}")
    offset = cluster.log_offset()
    before = cluster.sdiag()
    print(f"{kind}: {' '.join(argv)}", file=sys.stderr)
    rc, makespan = run_snakemake(
        cluster.wrap(argv), env, os.path.join(where, "snakemake.log"), args.timeout
    )
    at_exit = cluster.sdiag()
    time.sleep(args.settle)
    after = cluster.sdiag()
    left = cluster.queue()
    ids = submitted_ids(cluster.log_since(offset))
    rpc_exit, reset_exit = rpc_delta(before, at_exit)
    rpc, reset = rpc_delta(before, after)
    jobs_sdiag = (
        after.jobs_submitted - before.jobs_submitted
        if after.jobs_submitted is not None and before.jobs_submitted is not None
        else None
    )
    counters_reset = reset or reset_exit or before.since != after.since
    if counters_reset or jobs_sdiag is None or jobs_sdiag < 0:
        jobs = len(ids)  # sdiag's counters were reset (midnight UTC, a restart): the log's count
    else:
        jobs = jobs_sdiag
    out = check_outputs(where, wf["sleepers"])
    result = {
        "argv": argv,
        "rc": rc,
        "makespan_s": round(makespan, 2),
        "jobs_submitted": jobs,
        "jobs_submitted_sdiag": jobs_sdiag,
        "job_ids_logged": ids,
        "rpcs": sum(rpc.values()),
        "rpcs_at_exit": sum(rpc_exit.values()),
        "rpcs_build_info": rpc.get(BUILD_INFO, 0),
        "rpc_by_type": rpc,
        "counters_reset": counters_reset,
        "jobs_left_after_settle": left,
        "outputs": out,
        "workflow": wf,
        "log": os.path.join(where, "snakemake.log"),
    }
    print(
        f"{kind}: rc {rc}, {makespan:.1f} s, {jobs} SLURM jobs, {result['rpcs']} RPCs, "
        f"outputs {'complete' if out['complete'] else 'INCOMPLETE'} on {sorted(out['hosts'])}",
        file=sys.stderr,
    )
    if len(ids) != jobs:
        print(f"{kind}: note: slurmctld's log names {len(ids)} submitted jobs", file=sys.stderr)
    return result


def idle_rate(cluster: Cluster, seconds: float) -> float:
    """The cluster's own RPCs per second with nothing submitted (the slurmds' messages)."""
    a = cluster.sdiag()
    time.sleep(seconds)
    b = cluster.sdiag()
    return round(sum(rpc_delta(a, b)[0].values()) / seconds, 3)


# ---------------------------------------------------------------- the table


def ratio(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "-"
    return f"{a / b:.3g}"


def table(runs: dict[str, dict]) -> str:
    head = ["", "makespan s", "SLURM jobs", "slurmctld RPCs"]
    ref = runs.get("slurm")
    if ref and "pilot" in runs:
        head += ["makespan pilot/slurm", "jobs pilot/slurm", "RPCs pilot/slurm"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for kind in RUNS:
        r = runs.get(kind)
        if r is None:
            continue
        cells = [LABELS[kind], f"{r['makespan_s']:.1f}", str(r["jobs_submitted"]), str(r["rpcs"])]
        if len(head) > 4:
            if kind == "slurm":
                cells += ["1", "1", "1"]
            else:
                cells += [
                    ratio(r["makespan_s"], ref["makespan_s"]),
                    ratio(r["jobs_submitted"], ref["jobs_submitted"]),
                    ratio(r["rpcs"], ref["rpcs"]),
                ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rpc_table(runs: dict[str, dict], top: int = 10) -> str:
    kinds = [k for k in RUNS if k in runs]
    names: set[str] = set()
    for k in kinds:
        names |= set(runs[k]["rpc_by_type"])
    order = sorted(names, key=lambda n: -max(runs[k]["rpc_by_type"].get(n, 0) for k in kinds))
    lines = [
        "| RPC | " + " | ".join(LABELS[k] for k in kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    for name in order[:top]:
        lines.append(
            f"| {name} | " + " | ".join(str(runs[k]["rpc_by_type"].get(name, 0)) for k in kinds)
            + " |"
        )  # fmt: skip
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("-n", "--instances", type=int, default=300, help="rule instances (300)")
    ap.add_argument("--seed", type=int, default=57)
    ap.add_argument("--jobs", type=int, default=100, help="snakemake --jobs, both runs (100)")
    ap.add_argument("--runtime", type=int, default=10, help="default runtime, minutes (10)")
    ap.add_argument("--mem-mb", type=int, default=500, help="default mem_mb (500)")
    ap.add_argument("--runs", default="slurm,pilot", help="which, in this order (slurm,pilot)")
    ap.add_argument("--pilot-nodes", type=int, help="--pilot-nodes (default: --nodes)")
    ap.add_argument("--pilot-max-nodes", type=int, help="--pilot-max-nodes (default: fixed)")
    ap.add_argument("--pilot-runtime", type=int, default=120, help="--pilot-runtime, min (120)")
    ap.add_argument(
        "--pilot-poll-interval", type=float, default=30.0,
        help="the pilot's queue_poll_interval, s (30: the default a site's config has)",
    )  # fmt: skip
    ap.add_argument(
        "--slurm-status-interval", type=int,
        help="--slurm-init-seconds-before-status-checks (default: the plugin's, 40)",
    )  # fmt: skip
    ap.add_argument("--partition", help="SLURM partition (default: the cluster's default)")
    ap.add_argument(
        "--snakemake-arg", action="append", metavar="ARG", help="one more snakemake argument"
    )
    ap.add_argument("--layout", choices=("netns", "host"), default="netns")
    ap.add_argument("--nodes", type=int, default=4, help="cluster nodes (4)")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs per node (2)")
    ap.add_argument("--tag", default="sb", help="namespace prefix of the cluster (sb)")
    ap.add_argument("--slurm-dir", help="its state directory (/tmp/pilot-smbench-slurm)")
    ap.add_argument("--keep-cluster", action="store_true", help="leave a cluster it started up")
    ap.add_argument("--workdir", help="where the runs' workflows go (default: a temp dir)")
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--settle", type=float, default=10.0, help="s after exit before sdiag (10)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per run, s (3600)")
    ap.add_argument("--drain-timeout", type=float, default=120.0)
    ap.add_argument("--json", default=RESULTS, help=f"results file ({RESULTS})")
    ap.add_argument("--dry-run", action="store_true", help="the workflow and snakemake -n only")
    ap.add_argument("--generate", metavar="DIR", help="write the workflow to DIR and exit")
    args = ap.parse_args(argv)
    args.runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    bad = [r for r in args.runs if r not in RUNS]
    if bad or not args.runs:
        ap.error(f"--runs: {args.runs!r}: each of {', '.join(RUNS)}")
    if args.instances < 2:
        ap.error("-n must be at least 2 (one job and the gather)")
    if args.pilot_nodes is None:
        args.pilot_nodes = args.nodes
    if args.pilot_max_nodes is not None and args.pilot_max_nodes < args.pilot_nodes:
        ap.error("--pilot-max-nodes below --pilot-nodes")
    return args


def dry_run(args: argparse.Namespace) -> int:
    top = tempfile.mkdtemp(prefix="smbench-dry-")
    try:
        wf = write_workflow(top, args.instances, args.seed)
        out = subprocess.run(
            [sys.executable, "-m", "snakemake", "-n", "--directory", top, "--jobs", "1"],
            capture_output=True, text=True, timeout=300, cwd=top,
        )  # fmt: skip
        print(json.dumps(wf, indent=1))
        print(out.stdout[-1500:], out.stderr[-1500:], sep="\n")
        return out.returncode
    finally:
        shutil.rmtree(top, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.generate:
        print(json.dumps(write_workflow(args.generate, args.instances, args.seed), indent=1))
        return 0
    if args.dry_run:
        return dry_run(args)
    if os.geteuid() != 0:
        raise SystemExit("needs root (tests/slurm.sh starts slurmctld, slurmd and munged)")

    cluster = Cluster(args)
    top = args.workdir or tempfile.mkdtemp(prefix="smbench-")
    os.makedirs(top, exist_ok=True)
    failed = False
    runs: dict[str, dict] = {}
    meta: dict = {}
    try:
        cluster.up()
        args.partition = args.partition or cluster.partition()
        meta = {
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "instances": args.instances,
            "seed": args.seed,
            "jobs": args.jobs,
            "layout": args.layout,
            "nodes": args.nodes,
            "cpus_per_node": args.cpus,
            "machine_cpus": os.cpu_count(),
            "pilot_nodes": args.pilot_nodes,
            "pilot_max_nodes": args.pilot_max_nodes,
            "slurm_status_interval": args.slurm_status_interval,
            "settle_s": args.settle,
            "slurm_conf": cluster.conf,
            "cluster_brought_up": cluster.brought_up,
        }
        meta["idle_rpc_per_s"] = idle_rate(cluster, args.settle)
        meta["pilot_poll_interval"] = args.pilot_poll_interval
        with default_config(cluster.conf) as linked:
            meta["default_conf_linked"] = linked
            for kind in args.runs:
                runs[kind] = measure(kind, cluster, args, top, args.instances)
                failed |= runs[kind]["rc"] != 0 or not runs[kind]["outputs"]["complete"]
    finally:
        if cluster.brought_up and not args.keep_cluster:
            cluster.down()
        if failed or args.keep_workdir:
            print(f"work directory kept: {top}", file=sys.stderr)
        elif not args.workdir:
            shutil.rmtree(top, ignore_errors=True)

    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "runs": runs}, f, indent=1)
    print(
        f"\n{args.instances} rule instances (seed {args.seed}), --jobs {args.jobs}, "
        f"{args.nodes} SLURM nodes x {args.cpus} CPUs ({args.layout} layout); pilot: "
        f"{args.pilot_nodes} nodes"
        + (f", up to {args.pilot_max_nodes}" if args.pilot_max_nodes else "")
        + f"; idle cluster: {meta['idle_rpc_per_s']} RPCs/s\n"
    )
    print(table(runs))
    print(
        "\nof which REQUEST_BUILD_INFO (the slurm plugin's `scontrol show config` at import): "
        + ", ".join(f"{LABELS[k]} {r['rpcs_build_info']}" for k, r in runs.items())
    )
    print("\n" + rpc_table(runs))
    print(f"\n{args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
