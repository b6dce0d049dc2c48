"""Descriptions are validated on construction and on assignment, with errors naming the field;
what needs the resource config is checked where a pilot is submitted."""

import re

import pytest

import pilot as rp

CPD = rp.ComputePartitionDescription


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"cores": -4}, r"ComputePartitionDescription: cores=-4 must be >= 0"),
        ({"gpus": "lots"}, r"gpus='lots' must be an integer >= 0 or one of \('ALL',\)"),
        ({"nodes": 0}, r"nodes=0 must be >= 1"),
        ({"size": "150%"}, r"size='150%' must be a share"),
        ({"size": "x%"}, r"size='x%' must be a share"),
        ({"size": "50%", "cores": 2}, r"size='50%' cannot be combined with cores="),
        ({"nodes": 1, "cores": 2}, r"nodes= takes whole nodes"),
        ({}, r"no size given"),
        ({"cores": 0, "gpus": 0}, r"empty partition"),
        ({"cores": 1, "config": "o r"}, r"config='o r' must be the name of an agent config"),
        ({"cores": 1, "colour": "red"}, r"unknown key\(s\) \['colour'\]"),
    ],
)
def test_partition_description_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CPD(**kwargs)


def test_partition_description_forms():
    assert CPD("50%").share == 0.5
    assert CPD(rp.FILL).size == rp.FILL
    assert CPD("fill").size == rp.FILL
    assert CPD(gpus=rp.ALL).gpus == rp.ALL
    assert CPD(cores=2, config=["fork"]).config == "fork"  # the RFC's list form
    d = CPD(cores=16, gpus=4, config="fork")
    assert CPD.from_stored(d.to_stored()) == d


def test_assignment_is_validated():
    d = CPD(cores=2)
    d.cores = 8
    assert d.cores == 8
    with pytest.raises(ValueError, match="cores=-1 must be >= 0"):
        d.cores = -1
    with pytest.raises(ValueError, match="unknown key 'coresx'"):
        d.coresx = 1
    u = rp.ComputeUnitDescription(executable="/bin/true")
    with pytest.raises(ValueError, match=r"ComputeUnitDescription: cores=0 must be >= 1"):
        u.cores = 0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"executable": ""}, r"executable='' must be a non-empty string"),
        ({"executable": "x", "cores": -1}, r"cores=-1 must be >= 1"),
        ({"executable": "x", "gpus": 1.5}, r"gpus=1.5 must be a whole number 0..\d+ or a fraction"),
        ({"executable": "x", "gpus": float("nan")}, r"gpus=nan must be a whole number"),
        ({"executable": "x", "gpus": float("inf")}, r"gpus=inf must be a whole number"),
        ({"executable": "x", "ranks": 10**400}, r"ranks=1000.* must be <= 2147483647"),
        ({"executable": "a\0b"}, r"executable='a\\x00b' must be a string without NUL"),
        (
            {"executable": "x", "arguments": ["\0"]},
            r"arguments\[0\]='\\x00' must be a string without",
        ),
        ({"executable": "x", "environment": {"A": "\0"}}, r"environment\['A'\]='\\x00' must be"),
        ({"executable": "x", "arguments": "a b"}, r"arguments='a b' must be a list of strings"),
        ({"executable": "x", "environment": {"A=B": "1"}}, r"environment key='A=B'"),
        ({"executable": "x", "exe": "y"}, r"unknown key\(s\) \['exe'\]"),
    ],
)
def test_unit_description_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rp.ComputeUnitDescription(**kwargs)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"parts": ["8 cores"]}, r"parts\[0\]='8 cores' must be a ComputePartitionDescription"),
        ({"parts": [CPD(cores=1)], "runtime": 0}, r"runtime=0 must be a number of minutes > 0"),
        ({"parts": [CPD(cores=1)], "runtime": 10**400}, r"runtime=1000.* must be a number of min"),
        ({"parts": [CPD(cores=1)], "runtime": float("nan")}, r"runtime=nan must be a number"),
        ({"parts": [CPD(cores=1)], "colour": 1}, r"unknown key\(s\) \['colour'\]"),
    ],
)
def test_pilot_description_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rp.ComputePilotDescription(**kwargs)


def test_descriptions_read_no_file(tmp_path):
    """Building or changing a description does no I/O: a resource that does not exist (yet)
    is only found out at submit."""
    missing = str(tmp_path / "later.yaml")
    pd = rp.ComputePilotDescription(resource=missing, parts=[CPD(cores=1, config="orte")])
    pd.network_config = str(tmp_path / "nodes.yaml")
    pd.parts = [CPD(cores=2)]
    assert pd.resource == missing and pd.parts[0].cores == 2


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            {"resource": "nowhere.at_all", "parts": [CPD(cores=1)]},
            r"resource='nowhere.at_all' is unknown; known "
            r"resources: \['cray.fake', 'local.localhost'",
        ),
        ({"parts": [CPD(cores=1, gpus=2)]}, r"parts\[0\].gpus=2 but the resource has no GPUs"),
        ({"parts": [CPD(gpus=rp.ALL)]}, r"parts\[0\].gpus='ALL' but the resource has no GPUs"),
        (
            {"parts": [CPD(cores=1, config="orte")]},
            r"parts\[0\].config='orte' must be one of \['default', 'fork'\]",
        ),
        (
            {"parts": [CPD("50%")]},
            r"parts\[0\].size='50%' is relative; give the pilot an "
            r"explicit size",
        ),
    ],
)
def test_pilot_errors_at_submit(session, kwargs, match):
    pmgr = rp.PilotManager(session)
    with pytest.raises(ValueError, match=match):
        pmgr.submit_pilots(rp.ComputePilotDescription(**kwargs))
    assert pmgr.get_pilots() == []  # nothing was started


def test_pilot_too_big_for_the_resource(session, tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("batch_system: local\ncores_per_node: 4\ngpus_per_node: 1\n")
    parts = [CPD(cores=1, gpus=1), CPD(cores=1, gpus=1)]
    pd = rp.ComputePilotDescription(resource=str(cfg), parts=parts)
    # (cores beyond a local resource's are logical: tests/test_work_conserving.py; GPUs are not)
    with pytest.raises(ValueError, match=r"parts\[1\] does not fit the resource: needs"):
        rp.PilotManager(session).submit_pilots(pd)


def test_resource_config_errors(session, tmp_path):
    cfg = tmp_path / "bad.yaml"
    pmgr = rp.PilotManager(session)
    pd = rp.ComputePilotDescription(resource=str(cfg), parts=[CPD(cores=1)])
    cfg.write_text("batch_system: sge\n")
    with pytest.raises(
        ValueError, match=r"batch_system='sge' must be one of \('local', 'slurm', 'pbs', 'lsf'\)"
    ):
        pmgr.submit_pilots(pd)
    cfg.write_text("cores_per_node: -2\n")
    with pytest.raises(ValueError, match=r"cores_per_node=-2 must be an integer >= 0"):
        pmgr.submit_pilots(pd)


def test_every_resource_config_key_is_documented_and_checked(tmp_path):
    """The keys are the ResourceConfig fields (one list), each with its doc there
    (pilot/config/resource_keys.py; docs/reference/configuration.md's table is made from them)."""
    from dataclasses import fields

    from pilot.config import resource_config
    from pilot.config.resource_keys import ResourceConfig

    documented = {f.name for f in fields(ResourceConfig) if f.metadata.get("doc")}
    assert set(resource_config.KEYS) == documented
    for key in resource_config.KEYS:  # a value of the wrong kind is refused, naming the key
        with pytest.raises(ValueError, match=rf"{key}="):
            resource_config.parse("t", {key: object()})
    cfg = resource_config.parse("t", {"mpi_launcher": "mpiexec"})  # the old name still works
    assert cfg.mpi_command == "mpiexec"


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"reruns": -1}, "Executor: reruns=-1 must be an integer >= 0"),
        ({"reruns": 1.5}, "Executor: reruns=1.5 must be an integer >= 0"),
        ({"cores": 0}, "Executor: cores=0 must be an integer >= 1"),
        ({"cores": 2.0}, "Executor: cores=2.0 must be an integer >= 1"),
        ({"gpus": -1}, "Executor: gpus=-1 must be a number >= 0"),
        ({"gpus": float("nan")}, "Executor: gpus=nan must be a number >= 0"),
    ],
)
def test_an_executor_refuses_bad_arguments_by_its_own_name(kwargs, says):
    """Before any session or pilot is made (reruns=-1 was taken; cores=0 was said as a unit
    description's)."""
    with pytest.raises(ValueError, match=re.escape(says)):
        rp.Executor(**kwargs)
