"""What type checkers and editors see of pilot.pmgr.compat.futures: the names its table imports on
first use (__init__.py), as they resolve. A stub, so that the package imports none of them until
asked (tests/test_layers.py: it and the table may not drift apart)."""

from pilot.pmgr.compat.futures.executor import (
    Executor as Executor,
    ExecutorError as ExecutorError,
    call_outcome as call_outcome,
)
