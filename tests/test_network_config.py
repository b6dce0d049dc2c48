"""`pilot network-config`: this node's descriptor, and reading such a file back."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from pilot.config import network
from tests.test_cli import cli

FIELDS = {"name", "host_id", "ip_addrs", "is_primary", "num_cpus", "gpus", "physical_mem", "state"}


def test_yaml_and_json_output_fields():
    out = cli("network-config")
    assert out.returncode == 0, out.stderr
    cfg = yaml.safe_load(out.stdout)
    assert list(cfg) == [0]
    node = cfg[0]
    assert set(node) == FIELDS
    assert node["is_primary"] is True and node["state"] == "up"
    assert node["num_cpus"] == len(os.sched_getaffinity(0))
    assert node["physical_mem"] > 0 and isinstance(node["host_id"], int)
    assert "127.0.0.1" not in node["ip_addrs"]
    as_json = json.loads(cli("network-config", "--format", "json").stdout)
    assert as_json["0"]["name"] == node["name"]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_file_round_trip(tmp_path, fmt):
    path = tmp_path / f"net.{fmt}"
    out = cli("network-config", "--format", fmt, "--output", str(path))
    assert out.returncode == 0 and out.stdout == ""
    loaded = network.load(str(path))
    assert loaded == network.network_config()  # the same node, read back unchanged
    assert loaded[0]["name"] == network.describe()["name"]


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda c: c[0].pop("host_id"), r"node 0: missing field\(s\) \['host_id'\]"),
        (lambda c: c[0].update(num_cpus="two"), r"node 0: num_cpus='two' must be of type int"),
        (lambda c: c[0].update(state="sleeping"), r"state='sleeping' must be one of"),
        (lambda c: c.update({1: dict(c[0])}), r"the primary must be node 0, and only it"),
        (lambda c: c.update({2: dict(c[0], is_primary=False)}), r"indices \[0, 2\] must be 0..1"),
    ],
)
def test_bad_files_name_node_and_field(tmp_path, change, match):
    cfg = network.network_config()
    change(cfg)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=match):
        network.load(str(path))


def test_missing_file():
    with pytest.raises(ValueError, match=r"network_config='/nonexistent.yaml': No such file"):
        network.load("/nonexistent.yaml")


def test_pilot_nodes_take_names_and_host_ids_from_the_network_config(session, tmp_path):
    import pilot as rp
    from tests.conftest import active_pilot

    base = network.describe()
    cfg = {
        i: dict(base, name=name, host_id=hid, is_primary=i == 0)
        for i, (name, hid) in enumerate([("alpha", 11), ("beta", 22), ("gamma", 33)])
    }
    path = tmp_path / "net.yaml"
    path.write_text(yaml.safe_dump(cfg))
    pilot, umgr = active_pilot(
        session,
        parts=(rp.ComputePartitionDescription(cores=12),),
        resource="local.simulated",
        network_config=str(path),
    )
    nodes = pilot.partitions[0].resources["nodes"]
    assert [(n["name"], n["host_id"]) for n in nodes] == [
        ("alpha", 11),
        ("beta", 22),
        ("gamma", 33),
    ]
    u = umgr.submit_units(
        rp.ComputeUnitDescription(
            executable="/bin/true",
            policy=rp.Policy(placement=rp.Policy.Placement.HOST_ID, host_id=22),
        )
    )
    assert u.wait(timeout=60) == rp.DONE and u.node == "beta"
    short = tmp_path / "one.yaml"
    short.write_text(yaml.safe_dump({0: cfg[0]}))
    pd = rp.ComputePilotDescription(
        resource="local.simulated",
        network_config=str(short),
        parts=[rp.ComputePartitionDescription(cores=12)],
    )
    with pytest.raises(ValueError, match=r"names 1 node\(s\), the pilot needs 3"):
        rp.PilotManager(session).submit_pilots(pd)
