"""`snakemake --executor pilot`: Snakemake 9's executor plugin, every job a unit of one pilot.

    executor.py    the Executor (Snakemake's RemoteExecutor): jobs in, reports out
    jobs.py        what a job asks (threads, gpu, tasks, runtime, mem_mb) and why one never fits
    pilot_run.py   the session, the pilot and the rp.Executor of one Snakemake run
    settings.py    common_settings and ExecutorSettings (the --pilot-* options)
    plugin/        the top-level package Snakemake finds by its name,
                   snakemake_executor_plugin_pilot (setup.cfg installs it as such; an editable
                   install puts plugin/ on sys.path)

Snakemake imports every installed plugin in every job it starts, so nothing of the pilot is
imported until a name is first asked for."""

from pilot.exports import declare

__getattr__, __dir__, __all__ = declare(
    __name__,
    {
        "Executor": "pilot.pmgr.compat.snakemake.executor",
        "ExecutorSettings": "pilot.pmgr.compat.snakemake.settings",
        "common_settings": "pilot.pmgr.compat.snakemake.settings",
    },
)
