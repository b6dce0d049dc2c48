"""CPython's own concurrent.futures tests, run with rp.Executor as the executor type.

    python -m tests.cpython_futures [--classes A,B] [DIR]
                                  # DIR: where test_concurrent_futures lives; A,B: of GENERIC

The tests are CPython's (Lib/test/test_concurrent_futures.py, 3.11: one module; a package
from 3.12), not copied here: the interpreter's own `test` package when it ships them, else the
copy `make` unpacks from Debian's libpython3.X-testsuite into .venv/cpython-tests (see the
Makefile).  The generic test classes run as CPython runs them for its own executors
(ExecutorMixin: a new executor of max_workers=5 per test), with rp.Executor; each is a local
pilot of 5 logical cores here.  Left out, because they name a standard-library executor
(`from concurrent.futures import <its class name>` in a child interpreter) and so cannot test
another executor: test_interpreter_shutdown, test_submit_after_interpreter_shutdown,
test_hang_gh83386 (tests/test_executor.py tests the same behaviour of rp.Executor).
--classes runs only those of the generic classes (tests/test_executor.py runs the four in two
such processes side by side: each test makes an executor of its own, and most of the suite's
time is its own sleeps and timeouts).
Prints `N passed, N failed` last; exit code 0 when all ran and passed.
"""

from __future__ import annotations

import importlib
import os
import sys
import unittest

GENERIC = ("ExecutorTest", "WaitTests", "AsCompletedTests", "ExecutorShutdownTest")
NOT_FOR_OTHERS = {
    "test_interpreter_shutdown": "imports the executor from concurrent.futures by class name",
    "test_submit_after_interpreter_shutdown": "imports the executor from concurrent.futures",
    "test_hang_gh83386": "imports the executor from concurrent.futures by class name",
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNPACKED = os.path.join(ROOT, ".venv", "cpython-tests")


def load(where: str | None = None):
    """CPython's test_concurrent_futures module (or package), or None when it is not there."""
    import test

    where = where or UNPACKED
    if os.path.isdir(where) and where not in test.__path__:
        test.__path__.append(where)
    try:
        return importlib.import_module("test.test_concurrent_futures")
    except ImportError:
        return None


def suite(mod, classes: tuple[str, ...] = GENERIC) -> unittest.TestSuite:
    import cloudpickle

    import pilot as rp

    # the test module is not importable where workers run (its directory is on test.__path__
    # only): its functions and classes travel by value
    cloudpickle.register_pickle_by_value(mod)

    def find(name: str):  # 3.11: attributes of the module; 3.12+: of its submodules
        if hasattr(mod, name):
            return getattr(mod, name)
        for sub in ("executor", "test_wait", "test_as_completed", "test_shutdown"):
            try:
                m = importlib.import_module(f"{mod.__name__}.{sub}")
            except ImportError:
                continue
            if hasattr(m, name):
                return getattr(m, name)
        raise AttributeError(name)

    util = mod if hasattr(mod, "ExecutorMixin") else importlib.import_module(f"{mod.__name__}.util")

    class PilotExecutorMixin(util.ExecutorMixin):
        executor_type = rp.Executor

    out = unittest.TestSuite()
    loader = unittest.TestLoader()
    for name in classes:
        cls = type(f"Pilot{name}", (find(name), PilotExecutorMixin, util.BaseTestCase), {})
        for test in loader.loadTestsFromTestCase(cls):
            method = test.id().rsplit(".", 1)[-1]
            why = NOT_FOR_OTHERS.get(method)
            if why is not None:
                setattr(cls, method, unittest.skip(why)(lambda self: None))
            out.addTest(test)
    return out


def main(argv: list[str]) -> int:
    classes = GENERIC
    if argv[:1] == ["--classes"]:
        classes = tuple(argv[1].split(","))
        unknown = set(classes) - set(GENERIC)
        if unknown:
            print(f"not generic classes: {sorted(unknown)}")
            return 2
        argv = argv[2:]
    mod = load(argv[0] if argv else None)
    if mod is None:
        print("test.test_concurrent_futures is not installed (make fetches it); nothing ran")
        return 2
    result = unittest.TextTestRunner(verbosity=2).run(suite(mod, classes))
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print(f"\n{passed} passed, {failed} failed, {skipped} skipped")  # (alone on its line)
    return 0 if result.wasSuccessful() and result.testsRun else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
