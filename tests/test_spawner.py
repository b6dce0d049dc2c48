"""agent/spawn.py's Spawner, every way it starts a process: agent/_spawn-src/'s spawn (bound
between vfork and exec), its start (the same without waiting for the exec: the unit runner's
way), and the fallback (posix_spawn, then bind).  Same contract: environment, working
directory, descriptors, process group, signal dispositions, binding, and errors that leave
nothing running (start's errors arrive once the child has settled)."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import time

import pytest

from pilot.agent import spawn as spawn_mod
from pilot.agent.spawn import Spawner

GREP = shutil.which("grep") or "/bin/grep"


class _Starting:
    """Spawner.start held to spawn's contract: wait (bounded) until the child settled, then
    raise its error (having reaped it) or return its pid."""

    def __init__(self, spawner: Spawner) -> None:
        self.inner = spawner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def spawn(self, *args, **kw) -> int:
        child = self.inner.start(*args, **kw)
        assert child.wait(20), "the child neither exec'd nor exited in 20 s"
        failed = child.error()
        if failed is not None:
            _, status = os.waitpid(child.pid, 0)
            assert os.waitstatus_to_exitcode(status) == 127
            raise failed
        return child.pid


@pytest.fixture(params=["native", "start", "start-clone", "posix_spawn"])
def spawner(request):
    """start-clone: start() through the older clone, as on kernels without clone3 (the child
    resets the handled signals itself)."""
    if request.param != "posix_spawn" and not spawn_mod.NATIVE:
        pytest.skip("agent/_spawn-src/ was not built (no C compiler)")
    if request.param.startswith("start") and not spawn_mod.NO_WAIT:
        pytest.skip("start() is built on x86-64 Linux only")
    s = Spawner({"PILOT_TEST_BASE": "base", "PILOT_TEST_OVER": "base"})
    s.native = request.param != "posix_spawn"
    previous = None
    if request.param == "start-clone":
        from pilot.agent import _spawn

        previous = _spawn.use_clone3(False)
    try:
        yield _Starting(s) if request.param.startswith("start") else s
    finally:
        if previous is not None:
            _spawn.use_clone3(previous)
        os.close(s.devnull)


def _run(spawner, argv, tmp_path, **kw) -> tuple[int, str]:
    """Start argv, wait for it (bounded), return (exit code, what it wrote)."""
    r, w = os.pipe()
    try:
        pid = spawner.spawn(argv, str(tmp_path), w, w, **kw)
    finally:
        os.close(w)
    deadline = time.monotonic() + 20
    chunks = []
    with os.fdopen(r, "rb") as f:
        chunks.append(f.read())
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), b"".join(chunks).decode()
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"{argv} did not end in 20 s")
        time.sleep(0.01)


def test_the_native_spawn_is_built_where_a_compiler_is():
    if os.environ.get("PILOT_NATIVE") == "0":
        pytest.skip("PILOT_NATIVE=0: the pure-Python spawn is under test")
    if shutil.which("cc") or shutil.which("gcc"):
        assert spawn_mod.NATIVE, "pip install -e . should have built agent/_spawn-src/"


def test_environment_directory_and_descriptors(spawner, tmp_path):
    env = {"PILOT_TEST_OVER": "unit", "PILOT_TEST_NEW": "x y=z"}
    script = 'echo "$PILOT_TEST_BASE|$PILOT_TEST_OVER|$PILOT_TEST_NEW|$PWD"; echo err >&2; read x'
    code, out = _run(spawner, ["/bin/sh", "-c", script + "; exit 3"], tmp_path, env=env)
    assert code == 3  # `read` got end-of-file: stdin is /dev/null
    assert out.splitlines() == [f"base|unit|x y=z|{tmp_path}", "err"]


def test_a_bare_name_is_looked_up_on_path(spawner, tmp_path):
    code, out = _run(spawner, ["sh", "-c", "echo found"], tmp_path)
    assert (code, out) == (0, "found\n")


def test_bound_to_its_cores_with_default_signals(spawner, tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    logical = len(allowed) + 1  # logical ids map onto the real cores round-robin
    code, out = _run(
        spawner,
        [GREP, "-E", "^(Cpus_allowed_list|SigIgn|SigBlk)", "/proc/self/status"],
        tmp_path,
        cpu_ids=[logical],
    )
    assert code == 0
    status = dict(line.split(":\t") for line in out.splitlines())
    if len(allowed) > 1:
        assert status["Cpus_allowed_list"] == str(allowed[logical % len(allowed)])
    # this process ignores SIGPIPE and SIGXFSZ (Python does): the unit must not
    ignored = int(status["SigIgn"], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
        assert not ignored & (1 << (sig - 1)), signal.Signals(sig).name
    assert int(status["SigBlk"], 16) == 0


def test_own_process_group(spawner, tmp_path):
    pid = spawner.spawn(["/bin/sleep", "5"], str(tmp_path), spawner.devnull, spawner.devnull)
    try:
        assert os.getpgid(pid) == pid
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_gpu_variable_goes_through_the_inherited_mask(spawner, tmp_path):
    own = Spawner({"CUDA_VISIBLE_DEVICES": "4,5,6"})
    own.native = spawner.native
    spawner = _Starting(own) if isinstance(spawner, _Starting) else own
    env = {"CUDA_VISIBLE_DEVICES": "2"}
    code, out = _run(
        spawner,
        ["/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"],
        tmp_path,
        env=env,
        gpu_var="CUDA_VISIBLE_DEVICES",
    )
    assert (code, out) == (0, "6\n")
    with pytest.raises(OSError, match="GPU 7 is not in the inherited"):
        spawner.spawn(
            ["/bin/true"],
            str(tmp_path),
            1,
            2,
            {"CUDA_VISIBLE_DEVICES": "7"},
            "CUDA_VISIBLE_DEVICES",
        )


def test_errors_name_what_failed(spawner, tmp_path):
    missing = str(tmp_path / "no-such-program")
    with pytest.raises(FileNotFoundError) as e:
        spawner.spawn([missing], str(tmp_path), 1, 2)
    assert e.value.filename == missing
    nodir = str(tmp_path / "no-such-dir")
    with pytest.raises(FileNotFoundError) as e:
        spawner.spawn(["/bin/true"], nodir, 1, 2)
    assert e.value.filename == nodir
    with pytest.raises(ValueError):
        spawner.spawn(["/bin/echo", "a\0b"], str(tmp_path), 1, 2)
    with pytest.raises(ValueError):
        spawner.spawn(["/bin/true"], str(tmp_path), 1, 2, {"A": "x\0y"})
    with pytest.raises(TypeError):
        spawner.spawn(["/bin/true"], str(tmp_path), 1, 2, {"A": 1})
    with pytest.raises(ValueError):
        spawner.spawn(["/bin/true"], str(tmp_path), 1, 2, {"A=B": "1"})


def test_a_script_without_a_program_line_is_not_run_by_a_shell(spawner, tmp_path, monkeypatch):
    script = tmp_path / "noshebang"
    script.write_text("echo ran\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    for name in ("noshebang", str(script)):  # found on PATH, or named by its path
        with pytest.raises(OSError) as e:
            spawner.spawn([name], str(tmp_path), 1, 2)
        assert e.value.errno == errno.ENOEXEC
    with pytest.raises(FileNotFoundError) as e:
        spawner.spawn(["no-such-program-anywhere"], str(tmp_path), 1, 2)
    assert e.value.filename == "no-such-program-anywhere"


def test_descriptors_below_3_in_the_wrong_place(spawner, tmp_path):
    """stdout given as descriptor 0 (a process started with its stdin closed): it must reach
    the unit's stdout, not be overwritten by /dev/null first."""
    r, w = os.pipe()
    saved = os.dup(0)
    try:
        os.dup2(w, 0)
        os.close(w)
        pid = spawner.spawn(["/bin/sh", "-c", "echo out; echo err >&2"], str(tmp_path), 0, 0)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    assert out == "out\nerr\n"


def test_argv_of_any_sequence_and_the_agent_stays_where_it_was(spawner, tmp_path):
    here = os.getcwd()
    code, out = _run(spawner, ("/bin/echo", "a", "b"), tmp_path)
    assert (code, out) == (0, "a b\n")
    if spawner.native:  # (the fallback chdirs the agent for posix_spawn)
        assert os.getcwd() == here


def test_nothing_is_left_running_after_a_failed_start(spawner, tmp_path):
    before = _children()
    for _ in range(3):
        with pytest.raises(FileNotFoundError):
            spawner.spawn(["/bin/true"], str(tmp_path / "gone"), 1, 2)
    assert _children() == before


def _children() -> set[int]:
    """This process's children, zombies included."""
    me = os.getpid()
    kids = set()
    with open(f"/proc/{me}/task/{me}/children") as f:
        kids.update(int(p) for p in f.read().split())
    return kids


def test_started_children_run_while_the_caller_goes_on(tmp_path):
    """start() returns before the exec: many children at once, each settles without an error
    and exits 0, while this process allocates and frees meanwhile (the children share its
    memory until they exec; nothing of it may be freed under them)."""
    if not spawn_mod.NO_WAIT:
        pytest.skip("start() is built on x86-64 Linux only")
    s = Spawner({})
    try:
        started = []
        for i in range(200):
            env = {"PILOT_TEST_I": str(i) * 50}
            started.append(s.start(["/bin/true", str(i)], str(tmp_path), 1, 2, env, None, [i]))
            _ = [bytes(100) for _ in range(50)]  # churn the allocator the children share
        codes = {}
        deadline = time.monotonic() + 30
        while len(codes) < len(started) and time.monotonic() < deadline:
            for child in started:
                if child.pid not in codes:
                    done, status = os.waitpid(child.pid, os.WNOHANG)
                    if done:
                        codes[child.pid] = os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
        assert set(codes.values()) == {0} and len(codes) == 200
        assert all(c.settled() and c.error() is None for c in started)
    finally:
        os.close(s.devnull)


def test_a_started_child_is_in_its_own_group_when_start_returns(tmp_path):
    """killpg(pid) must reach a child at once, even one that has not run yet (a unit canceled
    as it starts, or the other ranks of a unit whose rank failed to start)."""
    if not spawn_mod.NO_WAIT:
        pytest.skip("start() is built on x86-64 Linux only")
    s = Spawner({})
    try:
        for _ in range(50):
            child = s.start(["/bin/sleep", "30"], str(tmp_path), 1, 2)
            os.killpg(child.pid, signal.SIGKILL)  # ProcessLookupError if no such group
            _, status = os.waitpid(child.pid, 0)
            assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
    finally:
        os.close(s.devnull)


def test_the_runner_keeps_a_start_error_that_came_before_it_looked(tmp_path, monkeypatch):
    """A child can fail its exec and settle before the runner asks (the agent preempted right
    after start() returned): the unit still ends 'cannot start', its other ranks killed."""
    from pilot.agent.runners.local import LocalRunner
    from pilot.agent.scheduler import Scheduler

    node = {"index": 0, "name": "n0", "host_id": 1, "cores": [0, 1], "gpus": [], "pool": {}}
    cfg = {
        "nodes": [node],
        "session": "s",
        "pilot": "p",
        "uid": "part",
        "pilot_sandbox": str(tmp_path),
    }
    runner = LocalRunner(cfg)
    real_start = runner.spawner.start

    def late_start(*args, **kw):  # as if the agent lost its core right after the clone
        child = real_start(*args, **kw)
        assert child.wait(20)
        return child

    monkeypatch.setattr(runner.spawner, "start", late_start)
    script = tmp_path / "no-program-line"
    script.write_text("echo ran\n")
    script.chmod(0o755)
    sched = Scheduler([node], agent_node=None)
    unit = {"uid": "unit.1", "executable": str(script), "shell": False, "ranks": 2}
    sched.queue.append(unit)
    [(unit, alloc)] = list(sched.ready())
    sandbox = tmp_path / "unit.1"
    sandbox.mkdir()
    try:
        run = runner.spawn(unit, str(sandbox), alloc)
        deadline = time.monotonic() + 20
        ended = []
        while not ended and time.monotonic() < deadline:
            ended = list(runner.reap())
            time.sleep(0.01)
        assert ended and ended[0][0] is run
        assert run.not_started and "Exec format error" in run.fail_reason, run.fail_reason
        assert not runner.starting
    finally:
        runner.close()
        os.close(runner.spawner.devnull)


def test_ranks_of_a_unit_whose_start_failed_are_reaped_with_nothing_else_running(tmp_path):
    """Rank 0 runs, rank 1 cannot start: the unit's start raises, rank 0 is killed, and its
    zombie goes at the runner's next reap though no other unit runs."""
    from pilot.agent.runners.local import LocalRunner
    from pilot.agent.scheduler import Scheduler

    node = {"index": 0, "name": "n0", "host_id": 1, "cores": [0, 1], "gpus": [], "pool": {}}
    cfg = {"nodes": [node], "session": "s", "pilot": "p", "uid": "part"}
    runner = LocalRunner({**cfg, "pilot_sandbox": str(tmp_path)})
    real_start = runner.spawner.start
    started = []

    def second_fails(*args, **kw):
        if started:
            raise OSError("rank 1 cannot start")
        started.append(real_start(*args, **kw))
        return started[-1]

    runner.spawner.start = second_fails
    sched = Scheduler([node], agent_node=None)
    unit = {"uid": "unit.1", "executable": "/bin/sleep", "arguments": ["30"], "ranks": 2}
    sched.queue.append(unit)
    [(unit, alloc)] = list(sched.ready())
    try:
        with pytest.raises(OSError, match="rank 1 cannot start"):
            runner.spawn(unit, str(tmp_path), alloc)
        pid = started[0].pid
        deadline = time.monotonic() + 20
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            assert list(runner.reap()) == []  # (no unit ends: it was never started)
            time.sleep(0.01)
        assert not os.path.exists(f"/proc/{pid}"), "its zombie is left"
        assert not runner.killed and not runner.starting
    finally:
        runner.close()
        os.close(runner.spawner.devnull)


def test_program_look_ups_follow_the_units_path_and_stay_bounded(tmp_path):
    mine = tmp_path / "bin"
    mine.mkdir()
    (mine / "true").write_text("#!/bin/sh\n")
    (mine / "true").chmod(0o755)
    s = Spawner({})
    try:
        agents = s.which("true")
        assert s.which("true", f"{mine}:/usr/bin:/bin") == str(mine / "true")
        assert s.which("true", f"rel:{os.path.dirname(agents)}") == agents  # (rel: skipped)
        with pytest.raises(FileNotFoundError):
            s.which("true", "relative/only")
        for i in range(spawn_mod.FOUND_MAX + 10):  # every unit with a PATH of its own
            s.which("true", f"/nowhere/{i}:{mine}")
        assert len(s.found) <= spawn_mod.FOUND_MAX
    finally:
        os.close(s.devnull)
