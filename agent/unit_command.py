"""How a unit's command runs: spawned directly, or through /bin/sh the way RADICAL-Pilot runs it.

RP writes a unit's command line into a shell script: the executable as written, then each
argument as one word in double quotes (a `"` inside is escaped), except an argument that is a
bare shell word: a word in single quotes, a shell operator (`>`, `>>`, `<`, `|`, `&&`, `||`,
`&`, `;`) or a glob word (`*.dat`: a `*` or `?` and no space), which are written as they are;
empty arguments are dropped; `pre_exec` lines go before it and `post_exec` lines after it, and
the unit's exit code is the command's.  So `$VAR`, `${VAR}`, `$(...)` and backquotes in
arguments expand, `["*.dat"]` matches files and `[">", "out.txt"]` redirects, while spaces in
an argument never split it: a sentence that holds a glob or an operator (an `sh -c` script) is
one word.

An rp.MPI unit (cpu_process_type or gpu_process_type MPI) is one MPI starter over its
ranks (`mpi_argv`: the resource's mpi_command, mpirun or srun), started where its first
rank is placed; its cores and GPUs on every node stay held until that MPI starter exits.

A unit needs that shell only when something would expand: pre/post exec lines, `$`, a
backquote or a backslash in an argument, an argument written as is (above), shell syntax in the
executable, or an executable that cannot be found (the shell then says so on the unit's stderr
and exits 127, as under RP).  Every other unit is spawned directly (agent/spawn.py): the same
argv the shell would have built, without starting a shell (the fast path).  `shell` in the unit
forces the choice: True always, False never (arguments are then the exact argv).
"""

from __future__ import annotations

import logging
import os

from pilot import staging

log = logging.getLogger("agent.staging")
SHELL = "/bin/sh"
_EXPANDS = ("$", "`", "\\")
_SYNTAX = set("$`\\'\"*?[]~;&|<>(){}#= \t\n")


_OPERATORS = (">", ">>", "<", "|", "&&", "||", "&", ";", "2>", "2>&1")


def _bare(arg: str) -> bool:
    """Written into the command line as is (RP): a word single-quoted by the user, a shell
    operator, or a glob word (one word: `*.txt`).  A sentence that holds one (`ls *.txt | wc`,
    an `sh -c` script) is one argument and stays one word: double-quoted, as every other."""
    if len(arg) >= 2 and arg[0] == arg[-1] == "'" and "'" not in arg[1:-1]:
        return True
    if arg in _OPERATORS:
        return True
    return ("*" in arg or "?" in arg) and not any(c.isspace() for c in arg)


def _word(arg: str) -> str:
    if _bare(arg):
        return arg
    return '"' + arg.replace('"', '\\"') + '"'


def needs_shell(unit: dict) -> bool:
    forced = unit.get("shell")
    if forced is not None:
        return forced
    if unit.get("pre_exec") or unit.get("post_exec") or getattr(unit, "not_found", False):
        return True
    if not _SYNTAX.isdisjoint(unit["executable"]):
        return True
    for a in unit.get("arguments") or ():
        if any(c in a for c in _EXPANDS) or _bare(a):
            return True
    return False


def script(unit: dict) -> str:
    """The shell script of a unit that needs one."""
    args = [a for a in unit.get("arguments") or () if a]  # RP drops empty arguments
    command = unit["executable"] + "".join(" " + _word(a) for a in args)
    lines = list(unit.get("pre_exec") or ())
    post = unit.get("post_exec") or ()
    if post:
        lines += [command, "__unit_exit=$?", *post, "exit $__unit_exit"]
    else:
        lines.append(command)
    return "\n".join(lines) + "\n"


def argv(unit: dict) -> list[str]:
    if needs_shell(unit):
        return [SHELL, "-c", script(unit)]
    args = unit.get("arguments") or ()
    if unit.get("shell") is None:
        args = [a for a in args if a]  # as the shell line would have it
    return [unit["executable"], *args]


def mpi_argv(unit: dict, launcher: str, hosts: list[tuple[str, int]]) -> list[str]:
    """An rp.MPI unit: one launcher process starts its ranks, `hosts` = [(node, ranks)].
    Open MPI's mpirun / mpiexec get the hosts and slots (no binding of its own: the pilot has
    placed the unit); srun starts a step inside the pilot's allocation (--overlap: the node
    daemons' step holds its CPUs)."""
    ranks = sum(n for _, n in hosts)
    name = os.path.basename(launcher)
    if name == "srun":
        head = [
            launcher,
            f"--ntasks={ranks}",
            f"--nodes={len(hosts)}",
            f"--nodelist={','.join(h for h, _ in hosts)}",
            "--overlap",
            "--cpu-bind=none",
            "--kill-on-bad-exit=1",
        ]
    else:
        head = [launcher, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"]
        head += ["--host", ",".join(f"{h}:{n}" for h, n in hosts)]
        if os.geteuid() == 0:
            head.append("--allow-run-as-root")  # Open MPI refuses root otherwise
    return head + argv(unit)


def stage_in(pilot_sandbox: str, sandbox: str, unit: dict) -> None:
    """The unit's pilot-side input steps (COPY, LINK, MOVE; pilot/staging.py), in order;
    StagingError naming the first that failed (one marked SKIP_FAILED / NON_FATAL is logged)."""
    for d in unit.get("stage_in") or ():
        why = staging.act(d, pilot_sandbox, sandbox)
        if why and why.startswith("skipped: "):
            log.warning("%s: input staging %s", unit["uid"], why)
        elif why:
            raise staging.StagingError(f"input staging: {why}")
