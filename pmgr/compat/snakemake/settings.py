"""What `snakemake --executor pilot` is told: the plugin's common settings and its options.

Snakemake 9 turns every field of `ExecutorSettings` into a command-line option
`--pilot-<field>` (underscores as dashes) and a profile key; `ExecutorSettings()` with no field
given (as Snakemake's own plugin tests make it) runs a pilot on this machine.

    option                    the pilot                                       default
    --pilot-resource R        its resource config (configs/, or a YAML path)  local.localhost
    --pilot-nodes N           nodes of its first batch job                    the resource's
    --pilot-cores N           cores in all (instead of nodes)                 the resource's
    --pilot-gpus N            GPUs in all                                     the resource's
    --pilot-memory MB         memory per node asked of the batch system       (not asked)
    --pilot-runtime MIN       its walltime                                    60 (local: a week)
    --pilot-max-nodes N       grow by batch jobs while jobs wait, up to N nodes, give idle
                              ones back (rp.Adapt)
    --pilot-queue Q           batch queue (SLURM partition)
    --pilot-project A         allocation / account
    --pilot-session SID       run in the pilot of that session, already up (detached by an
                              earlier run with --pilot-keep, or by a script)
    --pilot-pilot UID         which pilot of --pilot-session (default: its one live pilot)
    --pilot-keep              leave the pilot running at the end (detached), for the next
                              run's --pilot-session; the session id is printed
    --pilot-logdir DIR        a job's output (stdout and stderr) goes to
                              DIR/<rule or group>/<wildcards>/<jobid>.log   .snakemake/pilot_logs
    --pilot-keep-successful-logs   keep those of jobs that succeeded too (else removed)

A field set to a value it cannot take raises ValueError naming the option, the value and what
is accepted.
"""

# Snakemake reads the fields' types as objects and accepts typing.Optional, not `X | None`
# ruff: noqa: UP045
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from snakemake_interface_common.exceptions import ApiError
from snakemake_interface_executor_plugins.settings import CommonSettings, ExecutorSettingsBase

DEFAULT_RESOURCE = "local.localhost"
DEFAULT_LOGDIR = ".snakemake/pilot_logs"
LOCAL_RUNTIME = 7 * 24 * 60  # minutes: a local pilot lasts as long as the workflow
BATCH_RUNTIME = 60  # minutes: a batch pilot's walltime when --pilot-runtime is not given

common_settings = CommonSettings(
    non_local_exec=True,  # jobs run as units of the pilot, each a `python -m snakemake` of its own
    implies_no_shared_fs=False,  # the pilot's nodes share the workflow's file system
    job_deploy_sources=False,
    pass_default_storage_provider_args=True,
    pass_default_resources_args=True,
    # --envvars go into each unit's environment, not into its command line (no secret in `ps`)
    pass_envvar_declarations_to_cmd=False,
    auto_deploy_default_storage_provider=False,
    init_seconds_before_status_checks=0,  # units report their ends: nothing is polled
    pass_group_args=True,
)


def _opt(help: str, default=None):
    return field(default=default, metadata={"help": help, "env_var": False, "required": False})


@dataclass
class ExecutorSettings(ExecutorSettingsBase):
    """`--pilot-*` options of `snakemake --executor pilot` (see the module's header)."""

    resource: Optional[str] = _opt(
        "The pilot's resource: a name of the project's resource configs (local.localhost, "
        "slurm.<site>, ...) or the path of a YAML one. Default: local.localhost (this machine)."
    )
    nodes: Optional[int] = _opt("Nodes of the pilot's first batch job (default: the resource's).")
    cores: Optional[int] = _opt("Cores of the pilot in all, instead of --pilot-nodes.")
    gpus: Optional[int] = _opt("GPUs of the pilot in all (default: the resource's).")
    memory: Optional[int] = _opt(
        "MB of memory per node the pilot's job asks the batch system for; jobs whose mem_mb "
        "is more fail alone."
    )
    runtime: Optional[int] = _opt(
        f"The pilot's walltime in minutes (default {BATCH_RUNTIME}; a local pilot: as long as "
        "the workflow runs)."
    )
    max_nodes: Optional[int] = _opt(
        "Grow the pilot by batch jobs while jobs wait for room, up to this many nodes in all, "
        "and give idle nodes back (an adaptive pilot)."
    )
    queue: Optional[str] = _opt("The batch queue of the pilot's job (a SLURM partition).")
    project: Optional[str] = _opt("The allocation (account) the pilot's job is charged to.")
    session: Optional[str] = _opt(
        "Run the jobs in the pilot of this session (its id), already up: left running by an "
        "earlier run with --pilot-keep, or by a script (Session.close(terminate=False))."
    )
    pilot: Optional[str] = _opt(
        "Which pilot of --pilot-session to use (its uid, e.g. pilot.0000; default: the "
        "session's one live pilot)."
    )
    keep: bool = _opt(
        "Leave the pilot running when the workflow ends (detached), for a later run's "
        "--pilot-session; its session id is printed.",
        False,
    )
    logdir: Optional[Path] = _opt(
        f"Directory of the jobs' output files (default {DEFAULT_LOGDIR}): "
        "<rule or group>/<wildcards>/<jobid>.log"
    )
    keep_successful_logs: bool = _opt(
        "Keep the output files of jobs that succeeded too (default: only failed jobs' stay).",
        False,
    )

    def __post_init__(self) -> None:
        for name in ("nodes", "cores", "max_nodes", "runtime", "memory"):
            _at_least(name, getattr(self, name), 1)
        _at_least("gpus", self.gpus, 0)
        if self.nodes is not None and self.cores is not None:
            raise OptionError(
                f"--pilot-nodes={self.nodes} and --pilot-cores={self.cores}: give one "
                "(nodes, or cores in all)"
            )
        if self.pilot is not None and self.session is None:
            raise OptionError(
                f"--pilot-pilot={self.pilot!r} names a pilot of --pilot-session, which is not given"
            )
        if self.session is not None:
            made = {
                k: getattr(self, k)
                for k in ("resource", "nodes", "cores", "gpus", "memory", "runtime", "max_nodes")
                if getattr(self, k) is not None
            }
            made.update({k: getattr(self, k) for k in ("queue", "project") if getattr(self, k)})
            if made:
                options = ", ".join(f"--pilot-{k.replace('_', '-')}" for k in made)
                raise OptionError(
                    f"--pilot-session={self.session!r} runs in a pilot that is already up; "
                    f"{options} describe a new one: give --pilot-session or those"
                )


class OptionError(ApiError, ValueError):
    """A --pilot-* option Snakemake is given that cannot be: said as Snakemake says its own
    errors about its arguments (an ApiError: "Error: ..." and no traceback), and a ValueError."""


def _at_least(name: str, value, least: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise OptionError(
            f"--pilot-{name.replace('_', '-')}={value!r} must be an integer >= {least}"
        )
