"""What authentication costs: throughput with CURVE on every channel against the same tree with it
off, alternating in one run.

    python bench/auth.py [--n 3000] [--reps 8] [--where /dev/shm]

"Off" is a copy of this tree (in a temporary directory) whose `Keys.serve` / `Keys.client`
(pilot/wire/security.py) do nothing: no CURVE handshake, no encryption, no ZAP.  It exists only
here, for this measurement.  Each repetition runs bench/throughput.py --one (N /bin/true units
through a 2-core local pilot) for both trees, in alternating order; the table shows medians
[min-max] and on / off.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

from compare import fmt, throughput  # bench/compare.py: one throughput run of a tree

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("pilot", "agent", "partition", "pmgr", "configs", "bench")


def auth_off_copy(where: str) -> str:
    tree = os.path.join(where, "auth-off")
    for name in SOURCES:
        shutil.copytree(
            os.path.join(HERE, name),
            os.path.join(tree, name),
            ignore=shutil.ignore_patterns("__pycache__", "results"),
        )
    path = os.path.join(tree, "pilot", "security.py")
    with open(path) as f:
        text = f.read()
    for method in ("serve", "client"):
        head = f"    def {method}(self, sock: zmq.Socket) -> None:\n"
        assert head in text, f"pilot/wire/security.py has no Keys.{method}"
        text = text.replace(head, head + "        return  # bench/auth.py: authentication off\n")
    with open(path, "w") as f:
        f.write(text)
    return tree


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--where", default="/dev/shm", help="where unit sandboxes go")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-auth-") as tmp:
        trees = {"on": HERE, "off": auth_off_copy(tmp)}
        rate: dict[str, list[float]] = {"on": [], "off": []}
        start: dict[str, list[float]] = {"on": [], "off": []}
        for rep in range(args.reps):
            for name in ("on", "off") if rep % 2 == 0 else ("off", "on"):
                t = throughput(trees[name], args.n, args.where)
                rate[name].append(t["rate"])
                start[name].append(t["startup_s"] * 1000)
                print(f"rep {rep + 1} {name}: {t['rate']:.0f} units/s", file=sys.stderr)
    print(
        f"\nauthentication on (CURVE) vs off: N={args.n} /bin/true units, sandboxes in "
        f"{args.where}, {args.reps} reps alternating\n"
    )
    print("| measure | off median [min-max] | on | on / off |")
    print("|---|---|---|---|")
    for label, values in (("units/s", rate), ("pilot start ms", start)):
        ratio = statistics.median(values["on"]) / statistics.median(values["off"])
        print(f"| {label} | {fmt(values['off'])} | {fmt(values['on'])} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
