"""Before and after, in one run: this tree against another checkout of the project.

    python bench/compare.py BASE_DIR [--n 3000] [--reps 3] [--cycles 20]

BASE_DIR is another checkout (e.g. `git worktree add /tmp/base HEAD~3`).  Each repetition runs,
alternately for the base and this tree, so that a noisy minute hits both:
  throughput  bench/throughput.py --one: N /bin/true units through a 2-core local pilot, unit
              sandboxes on tmpfs and on disk (units/s, pilot start)
  reconfig    bench/reconfig.py: start/stop latency of a partition, pilot start
The table shows medians [min-max] over the repetitions and this tree / base.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = {
    "reconfig start -> partition ACTIVE": "reconfig start ms",
    "reconfig stop -> partition CANCELED, cores free": "reconfig stop ms",
    "pilot start (submit -> first partition ACTIVE)": "pilot start ms (reconfig bench)",
}


def run(tree: str, args: list[str]) -> str:
    env = dict(os.environ, PYTHONPATH=tree)  # the tree's own packages, not the installed ones
    out = subprocess.run(
        [sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, timeout=900
    )
    if out.returncode != 0:
        raise RuntimeError(f"{tree}: {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def throughput(tree: str, n: int, where: str) -> dict:
    out = run(tree, ["bench/throughput.py", "--one", where, "--n", str(n)])
    return json.loads(out.strip().splitlines()[-1])


def reconfig(tree: str, cycles: int) -> dict:
    out = run(tree, ["bench/reconfig.py", "--cycles", str(cycles), "--starts", "3"])
    found = {}
    for line in out.splitlines():
        m = re.match(r"\| (.+?) \| ([\d.]+) \[", line)
        if m and m.group(1) in ROWS:
            found[ROWS[m.group(1)]] = float(m.group(2))
    return found


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=20)
    args = ap.parse_args()
    trees = {"base": os.path.abspath(args.base), "this": HERE}
    results: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
    places = {"tmpfs": "/dev/shm", "disk": tempfile.gettempdir()}
    for rep in range(args.reps):
        for name, tree in trees.items() if rep % 2 == 0 else reversed(trees.items()):
            got = {}
            for place, where in places.items():
                t = throughput(tree, args.n, where)
                got[f"units/s, sandboxes on {place}"] = t["rate"]
                got[f"pilot start ms ({place} run)"] = t["startup_s"] * 1000
            got.update(reconfig(tree, args.cycles))
            for k, v in got.items():
                results[name].setdefault(k, []).append(v)
            print(f"rep {rep + 1} {name}: {json.dumps(got)}", file=sys.stderr)
    print(
        f"\nbase {trees['base']} vs this tree {HERE}: N={args.n} /bin/true units, "
        f"{args.cycles} reconfig cycles, {args.reps} reps alternating\n"
    )
    print("| measure | base median [min-max] | this tree | this / base |")
    print("|---|---|---|---|")
    for k in results["this"]:
        b, t = results["base"].get(k), results["this"][k]
        ratio = f"{statistics.median(t) / statistics.median(b):.2f}" if b else "-"
        print(f"| {k} | {fmt(b) if b else '-'} | {fmt(t)} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
