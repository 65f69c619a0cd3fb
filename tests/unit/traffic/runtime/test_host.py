"""traffic.runtime.host: the coordinator with its agents in the same process and loop (loopback addresses, no
namespaces, no root). Every order is sent, verified, reported and logged as a plan line the merge understands;
an order is due at the cluster's own time (its timer, or the arrival that set it off), so start lateness is
measured from there."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.unit.traffic.runtime.test_coordinator import config
from traffic.runtime import host, records


def hosted_config(tmp: Path, policy: str = "striped") -> dict:
    cfg = config(tmp, policy)
    port = free_port()
    cfg["port"] = port
    cfg["hosted"] = [{"name": f"gpu{g}", "netns": None, "listen": [f"127.0.1.{g}:{port}", f"127.0.2.{g}:{port}"]}
                     for g in range(1, 5)]
    Path(cfg["agents_dir"]).mkdir()
    return cfg


@pytest.mark.parametrize("policy", ["striped", "adaptive"])
def test_hosted_agents_serve_and_verify_every_message(tmp_path, policy):
    cfg = hosted_config(tmp_path, policy)
    coord = host.HostCoordinator(cfg)
    res = asyncio.run(asyncio.wait_for(coord.run(), 60))
    assert res["failed_messages"] == 0 and res["in_flight_at_end"] == 0
    assert res["measured_requests"] > 0 and res["ep_bytes"] > 0
    rows = records.merge_results(cfg["agents_dir"], t0=coord.t0)
    assert len(rows) == res["messages"] == len(coord.cluster.messages)
    assert all(r["verified"] for r in rows), [r["error"] for r in rows if not r["verified"]][:3]
    assert {r["kind"] for r in rows} == {"kv", "dispatch", "combine"}
    # due = the cluster's time of the send: every message's scheduled start is its model send time x dilation
    for r in rows:
        assert r["scheduled_start"] == pytest.approx(coord.cluster.sent_at[r["id"]] * coord.dilation, abs=2e-6)
    late = sorted(r["start"] - r["scheduled_start"] for r in rows)
    assert late[0] >= -1e-6 and late[len(late) // 2] < 0.05
    assert json.loads((tmp_path / "serving.json").read_text())["messages"] == len(rows)


def test_a_bad_listen_address_is_one_error(tmp_path, capsys):
    cfg = hosted_config(tmp_path)
    cfg["hosted"][0]["listen"] = ["nonsense"]
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    assert host.main([str(path)]) == 1
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out[-1]["event"] == "error" and "gpu1" in out[-1]["message"] and "ip:port" in out[-1]["message"]


def test_usage(capsys):
    assert host.main([]) == 2 and "usage" in capsys.readouterr().err
