"""Node daemons on test hosts (network namespaces): the bootstrap and its agents in one
namespace, a daemon per host namespace, every unit message crossing a veth link."""

from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from pilot.pmgr.core import reaper
from tests import netns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))


def resource(tmp_path, hosts, **over) -> str:
    cfg = {
        "description": "test hosts in network namespaces",
        "batch_system": "local",
        "launch_method": "netns",
        "node_daemons": True,
        "nodes": hosts.k,
        "hosts": hosts.hosts,
        "node_names": hosts.hosts,
        "address": hosts.addr(0),
        "cores_per_node": 2,
        "gpus_per_node": 0,
        "bringup_timeout": 4,
        "node_timeout": 6,
    }
    cfg.update(over)
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def scenario(hosts, name: str, res: str, *more: str) -> dict:
    out = hosts.run_in(
        hosts.ctl,
        [sys.executable, "-m", "tests.scenarios.netns_client", name, res, *more],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    left = reaper.session_processes(result["session"])
    if left:
        reaper.kill_session_processes(result["session"])
    assert not left, f"processes left behind: {left}"
    return result


@pytest.fixture
def hosts():
    with netns.TestHosts(3) as h:
        yield h
    assert not h.left(), "namespaces left behind"


def test_daemons_on_hosts_run_units_across_links(hosts, tmp_path):
    r = scenario(hosts, "spread", resource(tmp_path, hosts))
    assert [s for s, _ in r["parts"]] == ["ACTIVE", "ACTIVE"], r["parts"]
    assert [u["state"] for u in r["units"]] == ["DONE"] * 4, r["units"]
    ends = {d["name"]: d["endpoint"] for d in r["daemons"].values()}
    assert ends == {h: ends[h] for h in hosts.hosts} and all(
        ends[h].startswith(f"tcp://{hosts.addr(i)}:") for i, h in enumerate(hosts.hosts, 1)
    )
    nodes = set()
    for u in r["units"]:
        nodes.update([u["node"]] if isinstance(u["node"], str) else u["node"])
        ran_on = [u["node"]] if isinstance(u["node"], str) else u["node"]
        text: dict[str, str] = {}
        for node, _rank, stream, chunk in u["output"]:
            if stream == "stdout":
                text[node] = text.get(node, "") + chunk
        assert sorted(text) == sorted(ran_on)
        for node, t in text.items():
            assert t.split() == [node, "1"]  # ran in that host's namespace (it has an eth0)
    assert nodes == set(hosts.hosts)
    # channels beyond loopback use CURVE: peers without the session's keys run nothing
    assert r["rogues"] == {"no keys": False, "other keys": False}
    assert "refused a peer with an unknown CURVE key" in r["node0_log"]
    assert r["final"][0] == "CANCELED"
    log = r["log"]
    assert log.index("down.wait") < log.index("down.nodes") < log.index("down.bye")


def test_a_host_that_never_reports_is_named_and_marked_down(hosts, tmp_path):
    hosts.cut(3)
    r = scenario(hosts, "silent", resource(tmp_path, hosts))
    assert r["state"] == "ACTIVE", r
    assert r["waited"] < 4 + 10  # bringup_timeout plus start-up, not forever
    assert f"{hosts.hosts[2]} did not report up within 4 s" in r["log"]
    assert [r["network"][i]["state"] for i in "012"] == ["up", "up", "down"]
    assert r["network"]["2"]["name"] == hosts.hosts[2]
    assert r["nodes"]["2"] == {"name": hosts.hosts[2], "state": "down"}
    assert r["part"] == "ACTIVE" and r["unit"][0] == "DONE"
    assert r["big"][0] == "FAILED" and "does not fit" in r["big"][1]
    assert r["free"]["nodes"] == 0


def test_a_host_that_never_reports_fails_the_pilot_when_configured(hosts, tmp_path):
    hosts.cut(2)
    r = scenario(hosts, "silent", resource(tmp_path, hosts, node_failure="fail"))
    assert r["state"] == "FAILED"
    assert "bring-up failed" in r["reason"] and hosts.hosts[1] in r["reason"], r["reason"]
    assert r["waited"] < 4 + 10


def test_a_network_config_file_with_a_silent_host_in_the_middle(hosts, tmp_path):
    from pilot.config import network

    me = network.describe()
    given = {
        i: dict(me, name=h, host_id=500 + i, is_primary=i == 0) for i, h in enumerate(hosts.hosts)
    }
    path = tmp_path / "net.yaml"
    path.write_text(network.dump(given, "yaml"))
    hosts.cut(2)  # index 1: the table must reach index 2 past the gap
    r = scenario(hosts, "silent", resource(tmp_path, hosts, fanout=2), str(path))
    assert r["state"] == "ACTIVE", r
    net = r["network"]
    assert [(net[i]["name"], net[i]["state"]) for i in "012"] == [
        (hosts.hosts[0], "up"),
        (hosts.hosts[1], "down"),
        (hosts.hosts[2], "up"),
    ]
    assert (net["0"]["host_id"], net["2"]["host_id"]) == (500, 502)
    assert r["part"] == "ACTIVE" and sorted(r["unit"][1]) == [hosts.hosts[0], hosts.hosts[2]]
