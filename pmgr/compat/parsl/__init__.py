"""pilot.parsl.PilotExecutor: a Parsl executor whose tasks are units of a pilot (executor.py),
on rp.Executor (pmgr/compat/futures/)."""

from pilot.exports import declare

__getattr__, __dir__, __all__ = declare(
    __name__, {"PilotExecutor": "pilot.pmgr.compat.parsl.executor"}
)

TYPE_CHECKING = False  # (typing's, without importing typing: what type checkers and editors see)
if TYPE_CHECKING:  # the names of the table above, imported as they resolve (tests/test_layers.py)
    from pilot.pmgr.compat.parsl.executor import PilotExecutor as PilotExecutor
