"""What the pilot job runs when its resource has `pre_bootstrap` lines: a bash script in the pilot
sandbox, PILOT_SANDBOX/bootstrap.sh, that runs them in order, then execs the bootstrap.

    #!/bin/bash
    # (one block per line)
    echo '# pre_bootstrap: module load cray-python'
    module load cray-python
    rc=$?; if [ $rc != 0 ]; then echo "pre_bootstrap failed (exit $rc)": ... >&2; exit 1; fi
    exec /path/to/python -m pilot.partition.bootstrap PILOT_SANDBOX/bootstrap.json

Each line runs in the job's own shell (a `module load` or `source` changes the environment the
bootstrap, its node daemons and their units then inherit), bash because sites define `module`
for bash.  A line that fails ends the job at once with exit 1, the line named in
bootstrap.log, as RADICAL-Pilot's bootstrap_0.sh aborts on a failed pre_bootstrap_0 command.
Without pre_bootstrap lines the job runs the bootstrap directly (no script, no shell).
"""

from __future__ import annotations

import os
import shlex

SCRIPT = "bootstrap.sh"


def wrap(argv: list[str], rcfg, sandbox: str) -> list[str]:
    """The job's command line: `argv` itself, or bash running PILOT_SANDBOX/bootstrap.sh."""
    if not rcfg.pre_bootstrap:
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
    lines.append("exec " + shlex.join(argv))
    path = os.path.join(sandbox, SCRIPT)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o700)
    return ["/bin/bash", path]
