"""What the pilot job runs when its resource has `pre_bootstrap` lines, or a `python` naming
$VARS: a bash script in the pilot sandbox, PILOT_SANDBOX/bootstrap.sh, that runs the lines in
order, then execs the bootstrap.

    #!/bin/bash
    # (one block per line)
    echo '# pre_bootstrap: module load cray-python'
    module load cray-python
    rc=$?; if [ $rc != 0 ]; then echo "pre_bootstrap failed (exit $rc)": ... >&2; exit 1; fi
    # (one check per $VAR of python)
    if [ -z "${USER}" ]; then echo 'python=... needs $USER, unset in the job' >&2; exit 1; fi
    exec /scratch/"${USER}"/ve/bin/python3 -m pilot.partition.bootstrap PILOT_SANDBOX/bootstrap.json

Each line runs in the job's own shell (a `module load` or `source` changes the environment the
bootstrap, its node daemons and their units then inherit), bash because sites define `module`
for bash.  A line that fails ends the job at once with exit 1, the line named in
bootstrap.log, as RADICAL-Pilot's bootstrap_0.sh aborts on a failed pre_bootstrap_0 command.
The $VARS of `python` ($NAME, ${NAME}, a leading ~; an RP config's virtenv or
python_interpreter, `/scratch/gpfs/$USER/ve.rp`) are expanded by this shell, where the job
runs, after the pre_bootstrap lines, as RADICAL-Pilot expands them on the target; one unset
or empty ends the job, named.  (The bootstrap then starts its agents and node daemons on the
interpreter it runs on: partition/bootstrap.py.)  Without pre_bootstrap lines or $VARS the job
runs the bootstrap directly (no script, no shell).
"""

from __future__ import annotations

import os
import shlex

from pilot.processes import expanding, names_vars

SCRIPT = "bootstrap.sh"


def wrap(argv: list[str], rcfg, sandbox: str) -> list[str]:
    """The job's command line: `argv` itself, or bash running PILOT_SANDBOX/bootstrap.sh.
    `argv[0]` is the resource's `python` (or this interpreter when it names none)."""
    python = rcfg.python if names_vars(rcfg.python) else None
    if not rcfg.pre_bootstrap and python is None:
        return argv
    lines = [
        "#!/bin/bash",
        "# the pilot job: the resource's pre_bootstrap lines, then its bootstrap",
    ]
    for line in rcfg.pre_bootstrap:
        said = shlex.quote(f"# pre_bootstrap: {line}")
        failed = shlex.quote(f": {line}")
        lines.append(f"echo {said} >&2")
        lines.append(line)
        lines.append(
            f'rc=$?; if [ $rc != 0 ]; then echo "pre_bootstrap failed (exit $rc)"{failed} >&2; '
            "exit 1; fi"
        )
    exe = shlex.quote(argv[0])
    if python is not None:
        exe, names = expanding(python)
        for name in dict.fromkeys(names):
            said = shlex.quote(
                f"python={python!r} (the resource config's: an RP config's virtenv or "
                f"python_interpreter) needs ${name}, unset or empty in the job"
            )
            lines.append(f'if [ -z "${{{name}}}" ]; then echo {said} >&2; exit 1; fi')
    lines.append(f"exec {exe} {shlex.join(argv[1:])}")
    path = os.path.join(sandbox, SCRIPT)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o700)
    return ["/bin/bash", path]
