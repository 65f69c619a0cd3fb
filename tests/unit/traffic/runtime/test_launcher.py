"""The agent launcher on loopback: forked agents get t0 only after all are listening,
replay and verify, report exits, and stop cleanly; agents still waiting for t0 stop too.

No root: the agents stay in this namespace (netns None) on distinct 127/8 addresses.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from common.paths import REPO as ROOT
from tests.support.ports import free_port
from traffic.runtime.launcher import AgentSpec, Fleet
from traffic.runtime.records import merge_results, write_plans

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _fleet(tmp_path: Path, n: int, transfers_for) -> tuple[Fleet, list[str]]:
    names = [f"gpu{i}" for i in range(1, n + 1)]
    addr = {name: f"127.0.1.{i + 1}" for i, name in enumerate(names)}
    port = {name: free_port(addr[name]) for name in names}
    plans = write_plans(transfers_for(names, addr, port), tmp_path, agents=names)
    specs = [AgentSpec(name, None, ["--name", name, "--plan", str(plans[name]), "--out", str(tmp_path),
                                    "--t0-stdin", "--ready-file", str(tmp_path / f"{name}.ready"),
                                    "--listen", f"{addr[name]}:{port[name]}"], str(tmp_path / f"{name}.stderr"))
             for name in names]
    return Fleet(specs, tmp_path / "launcher.json", cwd=ROOT, env=ENV), names


def _wait(paths: list[Path], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"timed out waiting for {[p.name for p in paths if not p.exists()]}"
        time.sleep(0.02)


def _ring(names, addr, port):
    """Every agent sends two transfers to the next one, at 0.1 s and 0.3 s."""
    out = []
    for i, src in enumerate(names):
        dst = names[(i + 1) % len(names)]
        for k, start in enumerate((0.1, 0.3)):
            out.append({"id": 10 * i + k, "request_id": i, "src": src, "dst": dst, "src_ip": addr[src],
                        "dst_ip": addr[dst], "dst_port": port[dst], "bytes": 200_000 + 1000 * i, "start": start})
    return out


def test_forked_agents_start_on_the_common_t0_and_verify_every_transfer(tmp_path):
    fleet, names = _fleet(tmp_path, 6, _ring)
    try:
        _wait([tmp_path / f"{n}.ready" for n in names], 30)
        assert not list(tmp_path.glob("*.sent.jsonl")) or all(
            p.read_text() == "" for p in tmp_path.glob("*.sent.jsonl")), "nothing may start before t0"
        t0 = time.monotonic() + 0.3
        fleet.go(t0)
        _wait([tmp_path / f"{n}.done" for n in names], 30)
    finally:
        exits = fleet.stop()
    assert exits == {n: 0 for n in names}, [(tmp_path / f"{n}.stderr").read_text() for n in names]
    assert set(fleet.pids) == set(names) and len(set(fleet.pids.values())) == len(names)
    assert set(fleet.cpu_s) == set(names) and all(0 < c < 30 for c in fleet.cpu_s.values()), fleet.cpu_s
    rows = merge_results(tmp_path, t0)
    assert len(rows) == 12 and all(r["verified"] for r in rows), [r["error"] for r in rows]
    # events, not durations: no transfer started before its time on the common t0, and each agent started its
    # two transfers (0.1 s and 0.3 s) in that order
    assert all(r["start"] >= r["scheduled_start"] for r in rows), rows
    for name in names:
        mine = sorted((r for r in rows if r["src"] == name), key=lambda r: r["scheduled_start"])
        assert mine[1]["scheduled_start"] - mine[0]["scheduled_start"] == pytest.approx(0.2)  # 0.3 s - 0.1 s
        assert mine[0]["start"] < mine[1]["start"]


def test_agents_waiting_for_t0_stop_on_stop_and_record_nothing_started(tmp_path):
    fleet, names = _fleet(tmp_path, 3, _ring)
    _wait([tmp_path / f"{n}.ready" for n in names], 30)
    exits = fleet.stop(timeout_s=5)
    assert exits == {n: 0 for n in names}
    assert fleet.proc.returncode == 0
    rows = merge_results(tmp_path, 0.0)
    assert rows and not any(r["verified"] for r in rows)
    for pid in fleet.pids.values():
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


def test_an_agent_that_cannot_start_is_reported_with_its_exit_code(tmp_path):
    bad = AgentSpec("gpu9", None, ["--name", "gpu9", "--plan", str(tmp_path / "missing.plan.jsonl"), "--out",
                                   str(tmp_path), "--t0-stdin", "--listen", "127.0.1.9:0"],
                    str(tmp_path / "gpu9.stderr"))
    fleet = Fleet([bad], tmp_path / "launcher.json", cwd=ROOT, env=ENV)
    deadline = time.monotonic() + 20
    while "gpu9" not in fleet.exited():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert fleet.stop() == {"gpu9": 2}
    assert "cannot read plan" in (tmp_path / "gpu9.stderr").read_text()


def test_killing_the_launcher_takes_its_agents_with_it(tmp_path):
    fleet, names = _fleet(tmp_path, 3, _ring)
    _wait([tmp_path / f"{n}.ready" for n in names], 30)
    pids = dict(fleet.pids)
    assert fleet.launcher_alive()
    fleet.proc.kill()
    fleet.proc.wait()
    assert not fleet.launcher_alive()
    deadline = time.monotonic() + 10
    alive = list(pids.values())
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if os.path.exists(f"/proc/{p}")
                 and "zombie" not in open(f"/proc/{p}/status").read().lower()]
        time.sleep(0.05)
    assert not alive, f"agents outlived their launcher: {alive}"
