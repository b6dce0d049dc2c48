"""RADICAL-Pilot's sites here: its resource_*.json configs read as ours (pilot/config/rp_sites.py),
PBS Pro and LSF pilot jobs through PSI/J (pmgr/batch/pbs.py, lsf.py), and the node daemons'
launch methods for sites without srun: mpiexec and ssh (partition/launch/).

There is no PBS or LSF server here: the job scripts are PSI/J's own, rendered by a real
submission whose qsub / bsub (and qstat / bjobs, qdel / bkill) are stand-ins in a folder put
first on PATH: they keep the script, answer with a job id and a queued state, and record a
cancel.  The launch methods run for real across four network-namespace test hosts, each with
an OpenSSH server (tests/netns.py Sshd), mpiexec being MPICH's hydra."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
import yaml

import pilot as rp
from pilot.config import resource_config
from pilot.pmgr.core import reaper
from tests import netns
from tests.conftest import ROOT

FAKE = {  # name -> shell body; $D is the folder the stand-ins keep their files in
    "qsub": 'cp "$1" "$D/job.script"; echo 4242.pbs',
    "qstat": (
        'if [ -e "$D/canceled" ]; then s=F; x=265; else s=Q; x=0; fi; '
        'echo "{\\"Jobs\\": {\\"4242.pbs\\": {\\"job_state\\": \\"$s\\", '
        '\\"Exit_status\\": $x}}}"'
    ),
    "qdel": 'echo "$@" > "$D/canceled"',
    "bsub": 'cp "$1" "$D/job.script"; echo "Job <4343> is submitted to queue <pbatch>."',
    "bjobs": (
        'if [ -e "$D/canceled" ]; then s=EXIT; else s=PEND; fi; '
        'echo "{\\"RECORDS\\": [{\\"JOBID\\": \\"4343\\", \\"STAT\\": \\"$s\\", '
        '\\"EXIT_REASON\\": \\"\\", \\"KILL_REASON\\": \\"\\", \\"SUSPEND_REASON\\": \\"\\"}]}"'
    ),
    "bkill": 'echo "$@" > "$D/canceled"',
}


@pytest.fixture
def fake_batch(tmp_path, monkeypatch):
    folder = tmp_path / "fakebin"
    folder.mkdir()
    for name, body in FAKE.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\nD={folder}\n{body}\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return folder


@pytest.fixture
def user_configs(tmp_path, monkeypatch):
    """An empty user config folder (the real ~/.radical is never read or written)."""
    monkeypatch.setenv("RADICAL_CONFIG_USER_DIR", str(tmp_path / "user"))
    folder = tmp_path / "user" / ".radical" / "pilot" / "configs"
    folder.mkdir(parents=True)
    return folder


def test_rp_site_configs_become_ours(user_configs, monkeypatch):
    frontier = resource_config.load("ornl.frontier")
    assert (frontier.batch_system, frontier.launch_method, frontier.node_daemons) == (
        "slurm",
        "srun",
        True,
    )
    assert (frontier.cores_per_node, frontier.gpus_per_node, frontier.queue) == (112, 8, "batch")
    assert frontier.pre_bootstrap == ("module load cray-python",)
    assert frontier.sandbox == "$MEMBERWORK/%(pd.project)s/radical.pilot.sandbox"
    (blocked,) = frontier.notes  # 128 logical cores, 16 left out: which ones is not kept
    assert "system_architecture.blocked_cores=[0, 8," in blocked and "128 -> 112" in blocked
    polaris = resource_config.load("anl.polaris")
    assert (polaris.batch_system, polaris.launch_method, polaris.mpi_command) == (
        "pbs",
        "mpiexec",
        "mpiexec",
    )
    assert polaris.batch_options == {"pbs.l": "filesystems=grand:home"}
    assert polaris.pre_bootstrap == ("module use /soft/modulefiles", "module load conda")
    assert resource_config.load("nersc.perlmutter").batch_options == {"slurm.constraint": "cpu"}
    lassen = resource_config.load("llnl.lassen")  # LSF, jsrun: daemons start over ssh
    assert (lassen.batch_system, lassen.launch_method) == ("lsf", "ssh")
    assert any("launch_methods=" in n and "JSRUN" in n for n in lassen.notes)
    frontera = resource_config.load("tacc.frontera")
    assert frontera.required == ("project",) and frontera.mpi_command == "mpirun"
    assert frontera.pre_bootstrap[-1] == "module load   impi"  # MPIRUN's pre_exec_cached
    # an access schema picks the batch system; one over ssh is refused, naming it
    batch = resource_config.load("nersc.perlmutter", "interactive")
    assert (batch.batch_system, batch.launch_method) == ("local", "srun")
    with pytest.raises(ValueError, match=r"job_manager_endpoint='slurm\+ssh://.*ssh"):
        resource_config.load("tacc.frontera", "ssh")
    with pytest.raises(ValueError, match=r"access_schema='nope' must be one of \['local'\]"):
        resource_config.load("ornl.frontier", "nope")
    # the native YAML configs keep their names; RP's other sites are known too
    assert resource_config.load("local.localhost").batch_system == "local"
    known = set(resource_config.known_resources())
    assert {"ornl.frontier", "anl.aurora", "local.localhost"} <= known


def test_the_users_configs_win(user_configs):
    (user_configs / "resource_ornl.json").write_text(
        "# a comment line, as RP allows\n"
        + json.dumps(
            {"frontier": {"default_queue": "debug"}, "mine": {"cores_per_node": 3}},
        )
    )
    (user_configs / "resource_local.json").write_text(
        json.dumps({"localhost": {"cores_per_node": 5, "resource_manager": "FORK"}})
    )
    frontier = resource_config.load("ornl.frontier")  # laid over RP's, key by key
    assert (frontier.queue, frontier.cores_per_node) == ("debug", 112)
    assert resource_config.load("ornl.mine").cores_per_node == 3
    assert resource_config.load("local.localhost").cores_per_node == 5  # over our YAML too


def test_only_rps_mpiexec_starts_the_daemons_of_a_pbs_site(user_configs):
    """The mpiexec launch passes hydra's / PALS' -n, --ppn, --hostfile: a PBSPRO site whose
    MPI is MPIRUN (OpenMPI's takes no --ppn) starts its daemons by ssh, unless the user's
    entry names a `launcher` that takes them."""
    cheyenne = resource_config.load("ncar.cheyenne")  # PBSPRO, order [FORK, MPIRUN]
    assert (cheyenne.launch_method, cheyenne.launcher, cheyenne.mpi_command) == (
        "ssh",
        None,
        "mpirun",
    )
    assert resource_config.load("anl.polaris").launch_method == "mpiexec"  # [MPIEXEC]
    over = {"cheyenne": {"launcher": "mpiexec.hydra", "launcher_options": ["-iface", "ib0"]}}
    (user_configs / "resource_ncar.json").write_text(json.dumps(over))
    cheyenne = resource_config.load("ncar.cheyenne")
    assert (cheyenne.launch_method, cheyenne.launcher, cheyenne.launcher_options) == (
        "mpiexec",
        "mpiexec.hydra",
        ("-iface", "ib0"),
    )
    assert cheyenne.mpi_command == "mpirun"
    assert not [n for n in cheyenne.notes if "launcher" in n], cheyenne.notes
    (user_configs / "resource_ornl.json").write_text(json.dumps({"frontier": {"launcher": "x"}}))
    frontier = resource_config.load("ornl.frontier")  # srun starts them: the launcher, noted
    assert frontier.launch_method == "srun" and any(
        "launcher='x' is not used: resource_manager SLURM starts the node daemons by srun" in n
        for n in frontier.notes
    ), frontier.notes


def test_the_users_entry_is_laid_over_our_yaml_config_of_its_name(user_configs, caplog):
    """A user's resource_local.json changing one key of local.localhost changes that key of
    our YAML config, not the config (RP's own local.localhost has 8 cores and a GPU); its
    other names are RP entries of their own; our other local.* configs are left alone."""
    ours = resource_config.to_raw(resource_config.load("local.localhost"))
    nodes4 = resource_config.load("local.nodes4")
    (user_configs / "resource_local.json").write_text(
        json.dumps(
            {
                "localhost": {"virtenv": "/opt/ve", "lfs_path_per_node": "/tmp"},
                "mybox": {"cores_per_node": 3, "resource_manager": "FORK"},
            }
        )
    )
    mine = resource_config.load("local.localhost")
    assert resource_config.to_raw(mine) == {**ours, "python": "/opt/ve/bin/python3"}
    cores = len(os.sched_getaffinity(0))  # (cores_per_node: auto)
    assert (mine.cores_per_node, mine.gpus_per_node, mine.notes) == (cores, 0, ())
    assert rp.utils.get_resource_config("local.localhost")["gpus_per_node"] == 0
    assert resource_config.load("local.mybox").cores_per_node == 3
    assert resource_config.load("local.nodes4") == nodes4
    # only the site asked for is read: a malformed file is an error of its own site's alone
    (user_configs / "resource_broken.json").write_text('{"x": {"cores_per_node": 1,}')
    assert resource_config.load("ornl.frontier").cores_per_node == 112
    assert "local.mybox" in resource_config.known_resources()  # (the broken site left out)
    assert any("resource_broken.json" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match=r"resource_broken.json: not readable as JSON"):
        resource_config.load("broken.x")


def test_rp_values_of_the_wrong_type_are_errors_naming_the_rp_key(user_configs):
    """A string where RP wants a list of lines is one line (RP casts it so); every other
    wrongly typed value is an error naming the RP key and what it accepts."""
    base = {"job_manager_endpoint": "fork://localhost/", "resource_manager": "FORK"}
    cases = {
        "lines": {"pre_bootstrap_0": "module load a", "task_pre_exec": "export B=1"},
        "args": {"mandatory_args": "project", "cores_per_node": "64"},  # (RP casts both)
        "order": {"launch_methods": {"order": "MPIRUN"}},
        "cached": {"launch_methods": {"order": ["MPIRUN"], "MPIRUN": {"pre_exec_cached": "x"}}},
        "options": {"system_architecture": {"options": "nvme"}},
        "cores": {"cores_per_node": "64x"},
        "smt": {"cores_per_node": 64, "system_architecture": {"smt": "four"}},
        "blocked": {"cores_per_node": 64, "system_architecture": {"blocked_cores": 3}},
        "gpus": {"gpus_per_node": 4, "system_architecture": {"blocked_gpus": ["0"]}},
        "arch": {"system_architecture": "smt4"},
        "schemas": {"schemas": ["local"], "default_schema": "local"},
        "fields": {"mandatory_args": ["project", "walltime"]},
    }
    (user_configs / "resource_typed.json").write_text(
        json.dumps({name: {**base, **over} for name, over in cases.items()})
    )
    lines = resource_config.load("typed.lines")
    assert lines.pre_bootstrap == ("module load a", "export B=1")
    args = resource_config.load("typed.args")
    assert (args.required, args.cores_per_node) == (("project",), 64)
    errors = {
        "order": "launch_methods.order='MPIRUN' must be a list of strings",
        "cached": "launch_methods.MPIRUN.pre_exec_cached='x' must be a list of strings",
        "options": "system_architecture.options='nvme' must be a list of strings",
        "cores": "cores_per_node='64x' must be an integer >= 0",
        "smt": "system_architecture.smt='four' must be an integer >= 1",
        "blocked": "system_architecture.blocked_cores=3 must be a list of integers",
        "gpus": "system_architecture.blocked_gpus=['0'] must be a list of integers",
        "arch": "system_architecture='smt4' must be a mapping",
        "schemas": "schemas=['local'] must be a mapping of access schema names",
        "fields": "mandatory_args=['project', 'walltime'] must name pilot description fields",
    }
    for name, error in errors.items():
        with pytest.raises(ValueError) as info:
            resource_config.load(f"typed.{name}")
        assert f"RP resource config typed.{name}: {error}" in str(info.value), str(info.value)


def test_rp_utils_and_the_session_give_rp_configs(user_configs, session):
    cfg = rp.utils.get_resource_config(resource="anl.polaris")
    assert cfg["resource_manager"] == "PBSPRO" and cfg["schemas"]["local"]
    assert str(rp.utils.get_resource_job_url("anl.polaris")) == "pbspro://localhost/"
    assert str(rp.utils.get_resource_fs_url("anl.polaris", schema="interactive")) == (
        "file://localhost/"
    )
    assert rp.utils.get_resource_config(resource="nowhere.none") is None
    local = rp.utils.get_resource_config(resource="local.localhost")  # a YAML one, RP-shaped
    assert local["resource_manager"] == "FORK" and local["launch_methods"]["order"][0] == "FORK"
    one = session.get_resource_config("nersc.perlmutter", schema="batch")
    assert one["label"] == "nersc.perlmutter"
    assert one["job_manager_endpoint"] == "fork://localhost/"
    with pytest.raises(RuntimeError, match="unknown"):
        session.get_resource_config("nowhere.none")


def test_a_pilot_on_an_rp_site_needs_what_it_requires(user_configs, session, monkeypatch):
    pmgr = rp.PilotManager(session)
    with pytest.raises(ValueError, match=r"resource 'tacc.frontera' requires project="):
        pmgr.submit_pilots(rp.PilotDescription({"resource": "tacc.frontera", "nodes": 1}))
    monkeypatch.delenv("MEMBERWORK", raising=False)
    with pytest.raises(ValueError, match=r"needs \$MEMBERWORK, unset here"):
        pmgr.submit_pilots(
            rp.PilotDescription({"resource": "ornl.frontier", "nodes": 1, "project": "p1"})
        )


def _script(fake_batch) -> str:
    return (fake_batch / "job.script").read_text()


def test_a_pbs_pilot_job(user_configs, fake_batch, session, tmp_path, caplog):
    """RP's anl.polaris as it would be submitted there: PSI/J's PBS Pro script, the
    pre_bootstrap lines before the bootstrap, qdel when the pilot is canceled."""
    pd = rp.PilotDescription(
        {"resource": "anl.polaris", "nodes": 4, "project": "proj", "runtime": 30,
         "sandbox": str(tmp_path / "work")}
    )  # fmt: skip
    pilot = rp.PilotManager(session).submit_pilots(pd)
    assert pilot.state == rp.PENDING, pilot.reason
    script = _script(fake_batch)
    for line in (
        "#PBS -l select=4:ncpus=1:mpiprocs=1",
        "#PBS -l place=scatter:exclhost",
        "#PBS -l walltime=0:32:0",
        "#PBS -A proj",
        "#PBS -q debug-scaling",
        '#PBS -l "filesystems=grand:home"',
    ):
        assert line in script.splitlines(), (line, script)
    assert f"/bin/bash {pilot.sandbox}/bootstrap.sh" in script
    boot = open(os.path.join(pilot.sandbox, "bootstrap.sh")).read()
    assert boot.index("module use /soft/modulefiles") < boot.index("module load conda")
    assert boot.rstrip().splitlines()[-1].startswith("exec ")
    assert pilot.sandbox == str(tmp_path / "work" / session.uid / pilot.uid)
    notes = [r.getMessage() for r in caplog.records if "is not used" in r.getMessage()]
    assert notes == [], notes  # polaris' keys all map (place=scatter is the script's own)
    pilot.cancel(timeout=20)
    assert (fake_batch / "canceled").read_text().split() == ["4242.pbs"]


def test_an_lsf_pilot_job(user_configs, fake_batch, session, tmp_path):
    """RP's llnl.lassen, with system_architecture.options of the user's: `-alloc_flags
    "gpumps nvme"` is the batch system's words, not PSI/J's shell-quoting of them inside its
    double quotes; bkill when the pilot is canceled."""
    over = {"lassen": {"system_architecture": {"options": ["gpumps", "nvme"]}}}
    (user_configs / "resource_llnl.json").write_text(json.dumps(over))
    pd = rp.PilotDescription(
        {"resource": "llnl.lassen", "nodes": 2, "project": "acct", "runtime": 10,
         "sandbox": str(tmp_path / "work")}
    )  # fmt: skip
    pilot = rp.PilotManager(session).submit_pilots(pd)
    assert pilot.state == rp.PENDING, pilot.reason
    lines = _script(fake_batch).splitlines()
    for line in ("#BSUB -nnodes 2", '#BSUB -q "pbatch"', '#BSUB -P "acct"', "#BSUB -W 0:12"):
        assert line in lines, (line, lines)
    flags = [x for x in lines if x.startswith("#BSUB -alloc_flags")]
    assert flags == ['#BSUB -alloc_flags "gpumps nvme"'], lines
    pilot.cancel(timeout=20)
    assert (fake_batch / "canceled").read_text().split() == ["4343"]
    with pytest.raises(ValueError, match=r"batch_options=.* \(values without \" or newline\)"):
        resource_config.parse("x", {"batch_options": {"lsf.alloc_flags": 'a "b"'}})


def test_lsfs_launch_node_gets_no_daemon(tmp_path):
    """LSF's node file (Summit, Lassen) lists the launch node first, once, then each compute
    node once per slot: the daemons go to the compute nodes only, as RP leaves it out."""
    from pilot.partition.launch.mpiexec import MpiexecLaunch
    from pilot.partition.launch.ssh import SshLaunch

    hostfile = tmp_path / "hostfile"
    hostfile.write_text("batch3\n" + "".join(f"lassen{i}\n" * 44 for i in (7, 9)))
    env = {"LSB_DJOB_HOSTFILE": str(hostfile)}
    lassen = resource_config.load("llnl.lassen")
    argv = ["python3", "-m", "pilot.agent.node.daemon"]
    for method in (SshLaunch, MpiexecLaunch):
        launch = method.for_nodes(lassen, 2, argv, str(tmp_path), env, ["n0", "n1"])
        assert launch.names() == ["lassen7", "lassen9"], method
    with pytest.raises(ValueError, match=r"3 nodes, but only 2 host\(s\) known"):
        SshLaunch.for_nodes(lassen, 3, argv, str(tmp_path), env, ["n0", "n1", "n2"])
    hostfile.write_text("lassen7\nlassen7\nlassen9\nlassen9\n")  # no launch node listed
    assert SshLaunch.for_nodes(lassen, 2, argv, str(tmp_path), env, []).names() == [
        "lassen7",
        "lassen9",
    ]


def test_a_failing_pre_bootstrap_line_ends_the_pilot_naming_it(session, tmp_path):
    lines = ["true", "test -d /no/such/dir"]
    cfg = {"batch_system": "local", "cores_per_node": 1, "pre_bootstrap": lines}
    path = tmp_path / "res.yaml"
    path.write_text(yaml.safe_dump(cfg))
    pilot = rp.PilotManager(session).submit_pilots(
        rp.ComputePilotDescription(resource=str(path), cores=1, runtime=1)
    )
    assert pilot.wait([rp.FAILED, rp.DONE, rp.CANCELED], timeout=30) == rp.FAILED
    assert "pre_bootstrap failed (exit 1): test -d /no/such/dir" in pilot.reason + pilot.stderr


def test_the_vars_of_rps_virtenv_are_expanded_where_the_job_runs(
    user_configs, session, tmp_path, monkeypatch
):
    """RP's virtenv `/scratch/gpfs/$USER/ve.rp` (princeton.*): the job's shell expands its
    $VARS (bootstrap.sh), as RP does on the target; one unset there fails the pilot, named."""
    ve = tmp_path / "home" / "ve.rp" / "bin"
    ve.mkdir(parents=True)
    (ve / "python3").write_text(f'#!/bin/sh\necho ran >>"$0.ran"\nexec {sys.executable} "$@"\n')
    (ve / "python3").chmod(0o755)
    cfg = {"job_manager_endpoint": "fork://localhost/", "resource_manager": "FORK"}
    cfg.update(cores_per_node=1, virtenv="$PILOT_TEST_HOME/ve.rp", virtenv_mode="use")
    (user_configs / "resource_mine.json").write_text(json.dumps({"ve": cfg}))
    monkeypatch.setenv("PILOT_TEST_HOME", str(tmp_path / "home"))
    pd = {"resource": "mine.ve", "cores": 1, "runtime": 1, "sandbox": str(tmp_path / "work")}
    pd["exit_on_error"] = False
    pilot = rp.PilotManager(session).submit_pilots(rp.PilotDescription(pd))
    boot = open(os.path.join(pilot.sandbox, "bootstrap.sh")).read().splitlines()
    assert boot[-1].startswith(
        'exec "${PILOT_TEST_HOME}"/ve.rp/bin/python3 -m pilot.partition.bootstrap '
    ), boot
    assert pilot.env_lines("rp") == ['export PATH="${PILOT_TEST_HOME}"/ve.rp/bin:"$PATH"']
    umgr = rp.UnitManager(session)
    umgr.add_pilots(pilot)
    unit = umgr.submit_units(rp.ComputeUnitDescription(executable="/bin/true"))
    assert unit.wait(timeout=30) == rp.DONE, (unit.reason, pilot.reason)
    assert (ve / "python3.ran").read_text() == "ran\n"  # the bootstrap; agents run on its python
    pilot.cancel(timeout=20)
    monkeypatch.delenv("PILOT_TEST_HOME")
    pilot = rp.PilotManager(session).submit_pilots(rp.PilotDescription(pd))
    assert pilot.wait([rp.FAILED, rp.DONE, rp.CANCELED], timeout=30) == rp.FAILED
    said = "python3' (the resource config's: an RP config's virtenv or python_interpreter) "
    assert said + "needs $PILOT_TEST_HOME, unset or empty in the job" in pilot.reason, pilot.reason


# ---- the launch methods for real, across network-namespace test hosts ------------------------
WHY_NOT = netns.sshd_unavailable()


@pytest.fixture
def ssh_hosts(tmp_path):
    if WHY_NOT:
        pytest.skip(WHY_NOT)
    with netns.TestHosts(4) as hosts, netns.Sshd(hosts, tmp_path / "ssh") as sshd:
        yield hosts, sshd
    assert not hosts.left(), "namespaces left behind"


def four_nodes(hosts, sshd, tmp_path, method: str, env=None, launcher=None, say=None) -> dict:
    """A pilot of four nodes over `method` (`launcher`: its command); `env`: more of the
    client's environment; `say`: what the units echo instead of their node's name."""
    cfg = {
        "batch_system": "local",
        "launch_method": method,
        "node_daemons": True,
        "nodes": 4,
        "hosts": [hosts.addr(i) for i in range(1, 5)],
        "node_names": hosts.hosts,
        "address": hosts.addr(0),
        "cores_per_node": 2,
        "bringup_timeout": 10,
        "node_timeout": 6,
    }
    if method == "ssh":
        cfg["launcher_options"] = sshd.options
        if launcher:
            cfg["launcher"] = launcher
    else:  # hydra reaches the hosts over ssh, and tells them its address on the bridge
        cfg["launcher"] = "mpiexec.hydra"
        cfg["launcher_options"] = ["-launcher", "ssh", "-launcher-exec", sshd.wrapper]
        cfg["launcher_options"] += ["-iface", "br0"]
    path = tmp_path / f"{method}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = hosts.run_in(
        hosts.ctl,
        [sys.executable, "-m", "tests.scenarios.netns_client", "four", str(path)]
        + ([say] if say else []),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    left = reaper.session_processes(result["session"])
    if left:
        reaper.kill_session_processes(result["session"])
    assert not left, f"processes left behind: {left}"
    return result


def check_four(r: dict, hosts) -> None:
    assert r["state"] == rp.ACTIVE, (r["reason"], r.get("log"))
    assert [r["nodes"][str(i)] for i in range(4)] == [
        {"name": h, "state": "up"} for h in hosts.hosts
    ]
    assert [u["state"] for u in r["units"]] == [rp.DONE] * 8, r["units"]
    assert all(u["out"] == u["node"] for u in r["units"])
    assert {u["node"] for u in r["units"]} == set(hosts.hosts)  # every node ran units
    assert "down.bye" in r["log"]


def test_ssh_starts_the_daemons_of_a_four_node_pilot(ssh_hosts, tmp_path):
    hosts, sshd = ssh_hosts
    r = four_nodes(hosts, sshd, tmp_path, "ssh")
    check_four(r, hosts)
    assert "boot.nodes.launch: 4 daemon(s) by ssh" in r["log"]


def test_ssh_sends_the_environment_on_stdin_never_on_the_command_line(ssh_hosts, tmp_path):
    """The bootstrap's environment reaches the daemons (and their units) without being on
    ssh's command line, which `ps` shows to everyone: secrets stay out of it, and an
    environment larger than one argument may be (128 KiB) starts the daemons all the same."""
    hosts, sshd = ssh_hosts
    seen = tmp_path / "argv"
    seen.mkdir()
    ssh = os.path.realpath(shutil.which("ssh"))
    wrapper = tmp_path / "ssh-seen"  # ssh, its command line kept once it is ssh (by /proc)
    wrapper.write_text(
        "#!/bin/sh\nme=$$\n(for i in $(seq 100); do\n"
        f'  if [ "$(readlink /proc/$me/exe)" = {ssh} ]; then\n'
        f"    tr '\\0' '\\n' </proc/$me/cmdline >{seen}/$me; exit 0\n"
        "  fi; sleep 0.05\ndone) &\n"
        'exec ssh "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {f"PILOT_TEST_BIG_{i}": f"{i:02}" * 2000 for i in range(40)}  # 160 KB
    env["PILOT_TEST_TOKEN"] = "s3cret-t0ken 'quoted' \"and\" $not_expanded"
    say = "$PILOT_NODE_NAME ${#PILOT_TEST_BIG_39}; printenv PILOT_TEST_TOKEN"
    r = four_nodes(hosts, sshd, tmp_path, "ssh", env, str(wrapper), say)
    assert r["state"] == rp.ACTIVE, (r["reason"], r.get("log"))
    assert [u["state"] for u in r["units"]] == [rp.DONE] * 8, r["units"]
    for u in r["units"]:
        assert u["out"] == f"{u['node']} 4000\n{env['PILOT_TEST_TOKEN']}", u
    argvs = [p.read_text().split("\n") for p in sorted(seen.iterdir())]
    assert len(argvs) == 4, argvs
    assert sorted(a[a.index("BatchMode=yes") + 1] for a in argvs) == sorted(
        hosts.addr(i) for i in range(1, 5)
    )
    for argv in argvs:
        assert argv[0] == "ssh" and argv[-3:] == ["bash", "-s", ""], argv
        for value in env.values():
            assert not any(value in word for word in argv), argv


@pytest.mark.skipif(
    shutil.which("mpiexec.hydra") is None, reason="needs MPICH's mpiexec.hydra (apt install mpich)"
)
def test_mpiexec_starts_the_daemons_of_a_four_node_pilot(ssh_hosts, tmp_path):
    hosts, sshd = ssh_hosts
    r = four_nodes(hosts, sshd, tmp_path, "mpiexec")
    check_four(r, hosts)
    assert "boot.nodes.launch: 4 daemon(s) by mpiexec" in r["log"]
