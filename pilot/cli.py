"""The `pilot` command line.

    pilot partitions PILOT                      list a running pilot's partitions
    pilot reconfig PILOT [--stop UID|all]... [--start SIZE]...
                                                stop and start partitions of a running pilot
    pilot resources                             list the known resource configs
    pilot status SESSION [--database-url URL]   pilots, partitions and unit counts, from the store
    pilot export SESSION [--output FILE] [--format jsonl|chrome-trace]
                                                every state change as JSON lines, or a trace
                                                for Perfetto / chrome://tracing
    pilot plot SESSION [-o timeline.png|.svg|.pdf]
                                                busy cores / GPUs per partition, reconfigs
                                                and units per state over time, one figure
    pilot top [SESSION|PILOT] [--once]          a live view of a running pilot (default: the
                                                newest): partitions, units, latest events; q quits
    pilot dashboard [SESSION|PILOT] [--port N]  the same and more in a browser, live, with
                                                reconfig; prints its URL (with a token) first
    pilot network-config [--format yaml|json] [--output FILE] [--this-node]
                                                   (in a SLURM allocation: every node's)
                                                this node's descriptor for a pilot's bring-up

PILOT is a pilot uid (pilot.0000), or SESSION/PILOT when several sessions run a pilot of that
name; running pilots are found through their control file in the sessions directory
($PILOT_SESSIONS_DIR, default ~/.pilot/sessions).  SIZE: 50% | fill | cores=4,gpus=1 | nodes=2 |
gpus=all.  Exit status: 0 done, 1 the pilot refused the command (or a partition it started
FAILED), 2 bad usage or no such pilot.
"""

from __future__ import annotations

import argparse
import functools
import gc
import glob
import json
import os
import socket
import sys
import time
from contextlib import closing, contextmanager

from pilot.config import resource_config
from pilot.control_client import (  # (the dashboard reaches a pilot the same way)
    REPLY_TIMEOUT,
    UsageError,
    command,
    command_id,
    parse_size,  # noqa: F401 (pilot.cli.parse_size: the sizes --start takes)
    reconfig_args,
)


def sessions_dir() -> str:
    # the client is loaded only by commands that need it
    from pilot.pmgr.core import sessions_dir

    return sessions_dir()


def find_pilot(name: str) -> dict:
    """The control record of a running pilot named `name` (PILOT or SESSION/PILOT)."""
    session, _, pilot = name.rpartition("/")
    pattern = os.path.join(sessions_dir(), session or "*", pilot, "control.json")
    found = [f for f in sorted(glob.glob(pattern)) if not _stale(f)]
    if not found:
        base = sessions_dir()
        private = [d for d in [base, *glob.glob(os.path.join(base, session or "*"))] if _private(d)]
        if private:
            raise UsageError(
                f"cannot read {private[0]}: permission denied (a pilot is commanded only by "
                "the user who runs it: its session directory and keys are private)"
            )
        raise UsageError(f"no running pilot {name!r} under {base}")
    if len(found) > 1:
        names = [os.path.relpath(os.path.dirname(f), sessions_dir()) for f in found]
        raise UsageError(f"pilot {name!r} is ambiguous; name one of {names}")
    with open(found[0]) as f:
        control = json.load(f)
    control["keys"] = os.path.join(os.path.dirname(os.path.dirname(found[0])), "keys")
    return control


def _private(path: str) -> bool:
    """`path` (or a directory above it) is another user's."""
    try:
        os.listdir(path)
    except PermissionError:
        return True
    except OSError:
        pass
    return False


def _stale(path: str) -> bool:
    """A control file left by a bootstrap that died on this host (its pid is gone)."""
    try:
        with open(path) as f:
            control = json.load(f)
    except (OSError, ValueError):
        return True
    if control.get("host") != socket.gethostname() or not isinstance(control.get("pid"), int):
        return False  # another host's pilot: only its own bootstrap knows
    try:
        os.kill(control["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def settled(control: dict, started: list[str], timeout: float = REPLY_TIMEOUT) -> dict:
    """The pilot's partitions once the ones just started are ACTIVE or final (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        listing = command(control, "partitions", {})["result"]
        states = {p["uid"]: p["state"] for p in listing["partitions"]}
        if all(states.get(u) not in ("PENDING", "STARTING") for u in started):
            return listing
        if time.monotonic() > deadline:
            return listing
        time.sleep(0.05)


def _print_partitions(result: dict) -> None:
    size, free = result["size"], result["free"]
    print(
        f"{result['pilot']}: {size['nodes']} node(s), {size['cores']} cores, "
        f"{size['gpus']} GPUs; free: {free['cores']} cores, {free['gpus']} GPUs, "
        f"{free['nodes']} whole node(s)"
    )
    print(f"{'partition':28} {'state':9} {'nodes':>5} {'cores':>6} {'gpus':>5}  reason")
    for p in result["partitions"]:
        r = p["resources"] or {}
        print(
            f"{p['uid']:28} {p['state']:9} {len(r.get('nodes', [])):>5} "
            f"{r.get('cores', 0):>6} {r.get('gpus', 0):>5}  {p['reason'] or ''}"
        )
    for j in result.get("jobs") or []:  # the batch jobs it grew by (partition/growth.py)
        names = f": {', '.join(j['names'])}" if j.get("names") else ""
        why = j.get("why_ended") or j.get("reason") or ""
        print(f"{j['job']:28} {j['state']:9} {j['nodes']:>5} node(s){names}  {why}")


def open_session_store(session: str, url: str | None):
    from pilot.pmgr.store import open_existing

    url = url or os.environ.get("PILOT_DATABASE_URL")
    if url is None:
        path = os.path.join(sessions_dir(), session, "state.db")
        if not os.path.exists(path):
            raise UsageError(
                f"no session {session!r}: no {path} (give --database-url for a MongoDB store)"
            )
        url = f"sqlite:///{path}"
    store = open_existing(url)  # (UsageError's ValueError: a store that is not there)
    try:
        found = store.get("sessions", session)
    except Exception as exc:  # (a file that opened but is no store of ours)
        store.close()
        raise UsageError(f"--database-url {url}: {type(exc).__name__}: {exc}") from None
    if found is None:
        store.close()
        raise UsageError(f"no session {session!r} in {url}")
    return store


# -- the sub-commands: one function each, args from the parser below ----------------------------
def run_partitions(args: argparse.Namespace) -> int:
    """`pilot partitions PILOT [--json]`."""
    control = find_pilot(args.pilot)
    reply = command(control, "partitions", {})
    if _refused(control, reply):
        return 1
    if args.json:
        print(json.dumps(reply["result"], indent=1))
    else:
        _print_partitions(reply["result"])
    return 0


def run_reconfig(args: argparse.Namespace) -> int:
    """`pilot reconfig PILOT [--stop UID|all]... [--start SIZE]... [--json] [--id ID]`."""
    control = find_pilot(args.pilot)
    if not args.stop and not args.start:
        raise UsageError("reconfig: give --stop and/or --start")
    cid = command_id(args.id)
    reply = command(control, "reconfig", reconfig_args(args.stop, args.start), cid)
    if _refused(control, reply):
        return 1
    listing = settled(control, [s["uid"] for s in reply["result"]["started"]])
    if args.json:
        print(json.dumps({"reconfig": reply["result"], **listing}, indent=1))
    else:
        res = reply["result"]
        print(f"stopped: {', '.join(res['stopped']) or '-'}")
        named = [u for u in args.stop if u.lower() != "all"]  # (one that had ended: said so)
        ended = [u for u in named if not any(s == u or s.endswith(f".{u}") for s in res["stopped"])]
        if ended:
            print(f"not stopped, ended already: {', '.join(ended)}")
        for s in res["started"]:
            print(f"started: {s['uid']} {s['state']} {s['reason'] or ''}".rstrip())
        _print_partitions(listing)
    failed = [
        p["uid"]
        for p in listing["partitions"]
        if p["uid"] in {s["uid"] for s in reply["result"]["started"]} and p["state"] == "FAILED"
    ]
    if failed:
        print(f"pilot: partition(s) {', '.join(failed)} FAILED", file=sys.stderr)
        return 1
    return 0


def _refused(control: dict, reply: dict) -> bool:
    """The pilot refused the command (said so on stderr)."""
    if not reply.get("ok"):
        print(f"pilot: {control['pilot']} refused: {reply.get('error')}", file=sys.stderr)
        return True
    return False


def run_resources(args: argparse.Namespace) -> int:
    """`pilot resources`."""
    print("\n".join(resource_config.known_resources()))
    return 0


def run_status(args: argparse.Namespace) -> int:
    """`pilot status SESSION`: pilots, partitions and unit counts, from the store."""
    from pilot.pmgr.observe import text

    with closing(open_session_store(args.session, args.database_url)) as store:
        text.print_status(store, args.session)
        return 0


def run_export(args: argparse.Namespace) -> int:
    """`pilot export SESSION`: every state change as a JSON line (pmgr/observe/text.py), or a
    trace for Perfetto (pmgr/observe/trace.py)."""
    with closing(open_session_store(args.session, args.database_url)) as store:
        if args.format == "chrome-trace":
            from pilot.pmgr.observe import timeline, trace

            most = trace.MAX_UNITS if args.max_units is None else args.max_units
            if most < 0:
                raise ValueError(f"--max-units={most} must be 0 (all units) or more")
            with _no_gc():  # (hundreds of thousands of records, none of them cycles)
                tl = timeline.load(store, args.session, max_units=most or None)
            write = functools.partial(_without_gc, trace.write, tl)
            if tl.left_out:
                print(
                    f"pilot export: {tl.left_out} of {tl.units_total} units left out of the "
                    f"trace (the first {len(tl.units)} to change are in it; otherData says so; "
                    "--max-units N for more)",
                    file=sys.stderr,
                )
        else:
            from pilot.pmgr.observe import text

            write = functools.partial(text.write_history, store, args.session)
        if args.output:
            with open(args.output, "w") as out:
                write(out)
        else:
            write(sys.stdout)
        return 0


@contextmanager
def _no_gc():
    """The cyclic garbage collector off: it scanned every record made so far, again and again
    (a 200,000-unit trace: 27 -> 21 s)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _without_gc(fn, *args):
    with _no_gc():
        return fn(*args)


def run_plot(args: argparse.Namespace) -> int:
    """`pilot plot SESSION`: one figure of the session (pmgr/observe/plot.py)."""
    from pilot.pmgr.observe import plot

    plot.output_format(args.output)  # a bad name fails before the store is read
    with closing(open_session_store(args.session, args.database_url)) as store:
        drawn = plot.plot_session(store, args.session, args.output)
        print(
            f"{args.output}: {drawn['units']} units, {drawn['partitions']} partitions, "
            f"{drawn['reconfigs']} reconfig(s)"
        )
        return 0


def run_top(args: argparse.Namespace) -> int:
    """`pilot top [SESSION|PILOT|SESSION/PILOT]` (pmgr/observe/top.py)."""
    from pilot.pmgr.observe import top

    return top.run(args.target, args.once, args.interval, args.database_url)


def run_dashboard(args: argparse.Namespace) -> int:
    """`pilot dashboard [SESSION|PILOT]` (pmgr/observe/dashboard.py)."""
    from pilot.pmgr.observe import dashboard

    session = dashboard.session_of(args.target, args.database_url)
    return dashboard.run(session, args.port, args.interval, args.database_url)


def run_network_config(args: argparse.Namespace) -> int:
    """`pilot network-config`: this node's (or the allocation's nodes') descriptor."""
    from pilot.config import network

    text = network.dump(network.network_config(args.this_node), args.format)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


SUB_COMMANDS = {
    "partitions": run_partitions,
    "reconfig": run_reconfig,
    "resources": run_resources,
    "status": run_status,
    "export": run_export,
    "plot": run_plot,
    "top": run_top,
    "dashboard": run_dashboard,
    "network-config": run_network_config,
}


def build_parser() -> argparse.ArgumentParser:
    """The command line's grammar: a sub-parser per entry of SUB_COMMANDS."""
    ap = argparse.ArgumentParser(prog="pilot", description=__doc__.split("\n\n")[0])
    from pilot import __version__

    ap.add_argument("--version", action="version", version=f"pilot {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("partitions", help="list a running pilot's partitions")
    p.add_argument("pilot")
    p.add_argument("--json", action="store_true")
    r = sub.add_parser("reconfig", help="stop and start partitions of a running pilot")
    r.add_argument("pilot")
    r.add_argument("--stop", action="append", default=[], help="partition uid, or 'all'")
    r.add_argument("--start", action="append", default=[], help="50%%, fill, cores=N,gpus=N ...")
    r.add_argument("--json", action="store_true")
    r.add_argument(
        "--id", help="command id: a retry with the same id is applied only once (another "
        "command under a used id is refused)",
    )  # fmt: skip
    sub.add_parser("resources", help="list the known resource configs")
    st = sub.add_parser("status", help="a session's pilots, partitions and units, from the store")
    st.add_argument("session")
    st.add_argument(
        "--database-url", help="default: $PILOT_DATABASE_URL, else the session's sqlite file"
    )
    ex = sub.add_parser("export", help="a session's state histories as JSON lines")
    ex.add_argument("session")
    ex.add_argument("--database-url")
    ex.add_argument(
        "--output", "-o", type=_output_file, help="file to write (default: standard output)"
    )
    ex.add_argument(
        "--format",
        choices=("jsonl", "chrome-trace"),
        default="jsonl",
        help="jsonl: one state change a line (default); chrome-trace: Trace Event Format JSON",
    )
    ex.add_argument(
        "--max-units",
        type=int,
        default=None,
        help="chrome-trace: the first N units to change (default 50000, ~5 s and ~125 MB; 0: all)",
    )
    pl = sub.add_parser("plot", help="a session's busy cores, reconfigs and units over time")
    pl.add_argument("session")
    pl.add_argument("--database-url")
    pl.add_argument(
        "--output", "-o", type=_output_file, default="timeline.png",
        help=".png (default), .svg, .pdf",
    )  # fmt: skip
    tp = sub.add_parser("top", help="a live view of a running pilot (q quits)")
    tp.add_argument("target", nargs="?", help="SESSION, PILOT or SESSION/PILOT (default: newest)")
    tp.add_argument("--once", action="store_true", help="print one frame and exit")
    tp.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    tp.add_argument("--database-url")
    db = sub.add_parser("dashboard", help="a session, live in a browser (reconfig included)")
    db.add_argument(
        "target", nargs="?", help="SESSION, PILOT or SESSION/PILOT (default: the newest running)"
    )
    db.add_argument("--port", type=int, default=0, help="on 127.0.0.1 (default 0: a free one)")
    db.add_argument("--interval", type=float, default=1.0, help="seconds between looks")
    db.add_argument("--database-url")
    nc = sub.add_parser("network-config", help="this node's descriptor (name, host_id, ...)")
    nc.add_argument("--format", choices=("yaml", "json"), default="yaml")
    nc.add_argument(
        "--output", "-o", type=_output_file, help="file to write (default: standard output)"
    )
    nc.add_argument(
        "--this-node",
        action="store_true",
        help="only this node, also inside a SLURM allocation (default there: every node)",
    )
    return ap


def _output_file(path: str) -> str:
    """An --output: a file in a directory that exists (checked before anything is read)."""
    where = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(where):
        raise argparse.ArgumentTypeError(f"{path!r}: no such directory {where!r}")
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path!r} is a directory: give a file name")
    return path


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return SUB_COMMANDS[args.cmd](args)
    except (UsageError, ValueError) as exc:
        print(f"pilot: {exc}", file=sys.stderr)
        return 2
    except PermissionError as exc:  # (an --output it may not write, a store it may not read)
        print(f"pilot: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:  # an optional extra (pmgr/observe/extras.py says which)
        print(f"pilot: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
