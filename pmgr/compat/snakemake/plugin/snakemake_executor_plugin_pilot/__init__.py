"""Snakemake's executor plugin `pilot` (`snakemake --executor pilot`), by the name Snakemake 9
finds plugins by: the plugin is pilot.pmgr.compat.snakemake (pmgr/compat/snakemake/)."""

from pilot.pmgr.compat.snakemake import Executor, ExecutorSettings, common_settings

__all__ = ["Executor", "ExecutorSettings", "common_settings"]
