"""What type checkers and editors see of pilot.pmgr.compat.parsl: the names its table imports on
first use (__init__.py), as they resolve. A stub, so that the package imports none of them until
asked (tests/test_layers.py: it and the table may not drift apart)."""

from pilot.pmgr.compat.parsl.executor import PilotExecutor as PilotExecutor
