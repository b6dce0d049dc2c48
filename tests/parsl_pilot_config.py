"""A Parsl config whose only executor is PilotExecutor(label="pilot"), on a local pilot: the
config Parsl's own tests run with (tests/test_parsl_executor.py, as Parsl's Makefile runs them
with htex_local.py) and parsl-perf measures (bench/executors.py)."""

from parsl.config import Config

from pilot.parsl import PilotExecutor


def fresh_config():
    return Config(executors=[PilotExecutor(label="pilot")])
