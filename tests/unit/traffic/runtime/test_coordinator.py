"""traffic.runtime.coordinator with real agents over loopback TCP (no fabric, no root): a 4-GPU MoE cluster
whose EP groups span two 2-GPU servers serves for a second; every order is sent, verified, reported
and logged as a plan line the replay's merge understands."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.paths import REPO
from tests.support.ports import free_port
from traffic.runtime import coordinator, records


def config(tmp: Path, policy: str = "striped") -> dict:
    gpus = range(1, 5)
    return {
        "spec": {"model": "glm-5", "gpus_per_server": 2, "bytes_scale": 4e5, "chunk_bytes": 65536,
                 "prefill_chunk_tokens": 512, "decode_batch": 64, "decode_step_s": 0.02, "arrivals": "closed",
                 "concurrency": 6, "duration_s": 1.0, "warmup_s": 0.2, "seed": 3,
                 "prefill": [[[1], [3]]], "decode": [[[2], [4]]]},
        "requests": [[i, 0.0, 200 + 37 * i, 5 + i % 7] for i in range(200)],
        "dilation": 1.0, "agents": [f"gpu{g}" for g in gpus],
        "ips": {str(g): [f"127.0.1.{g}", f"127.0.2.{g}"] for g in gpus},
        "policy": policy,
        "port": 0, "socket": str(tmp / "c.sock"), "agents_dir": str(tmp / "agents"), "run_dir": str(tmp),
        "ready_timeout_s": 20, "drain_timeout_s": 10,
    }


def start_agents(cfg: dict, port: int) -> list[subprocess.Popen]:
    procs = []
    for g in range(1, 5):
        name = f"gpu{g}"
        argv = [sys.executable, "-m", "traffic.runtime.agent", "--name", name, "--control", cfg["socket"],
                "--out", cfg["agents_dir"], "--listen", f"127.0.1.{g}:{port}", "--listen", f"127.0.2.{g}:{port}"]
        procs.append(subprocess.Popen(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                      stderr=open(Path(cfg["agents_dir"]) / f"{name}.stderr", "w")))
    return procs


@pytest.mark.parametrize("policy", ["striped", "adaptive"])
def test_coordinator_and_agents_serve_and_verify_every_message(tmp_path, policy):
    cfg = config(tmp_path, policy)
    Path(cfg["agents_dir"]).mkdir()
    port = free_port("0.0.0.0")  # free on every address: each agent listens on it at its own 127/8 address
    cfg["port"] = port

    async def main():
        coord = coordinator.Coordinator(cfg)
        task = asyncio.create_task(coord.run())
        while not Path(cfg["socket"]).exists():
            await asyncio.sleep(0.01)
        procs = start_agents(cfg, port)
        try:
            return coord, await asyncio.wait_for(task, 60)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)

    coord, res = asyncio.run(main())
    assert res["failed_messages"] == 0 and res["in_flight_at_end"] == 0
    assert res["measured_requests"] > 0 and res["throughput_tokens_per_s"] > 0
    assert res["ep_bytes"] > 0 and res["nvlink_bytes"] == 0  # every pair of an engine spans the two servers
    rows = records.merge_results(cfg["agents_dir"], t0=coord.t0)
    assert len(rows) == res["messages"] == len(coord.cluster.messages)
    assert all(r["verified"] for r in rows), [r["error"] for r in rows if not r["verified"]][:3]
    kinds = {r["kind"] for r in rows}
    assert kinds == {"kv", "dispatch", "combine"}
    assert {r["src_ip"].split(".")[2] for r in rows} == {"1", "2"}  # both NIC ports used
    steps = (tmp_path / "steps.csv").read_text().splitlines()
    assert len(steps) > 10 and (tmp_path / "requests.csv").is_file()
    assert json.loads((tmp_path / "serving.json").read_text())["messages"] == len(rows)


def test_a_tensor_parallel_prefill_instance_sends_only_kv_and_every_ttft_adds_up(tmp_path):
    # glm5-recipe's shape on 2-GPU servers: prefill one TP2 instance (server 1), decode one EP2 group
    # inside server 2 (NVLink): the fabric carries KV only, from the instance's first GPU
    cfg = config(tmp_path)
    cfg["spec"] |= {"prefill": [[[1, 2]]], "decode": [[[3], [4]]], "prefill_chunk_tokens": 8192}
    Path(cfg["agents_dir"]).mkdir()
    port = 19100 + os.getpid() % 700
    cfg["port"] = port

    async def main():
        coord = coordinator.Coordinator(cfg)
        task = asyncio.create_task(coord.run())
        while not Path(cfg["socket"]).exists():
            await asyncio.sleep(0.01)
        procs = start_agents(cfg, port)
        try:
            return coord, await asyncio.wait_for(task, 60)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)

    coord, res = asyncio.run(main())
    assert res["failed_messages"] == 0 and res["in_flight_at_end"] == 0 and res["measured_requests"] > 0
    assert res["ep_bytes"] == 0 and res["nvlink_bytes"] > 0  # decode's all-to-all stays in server 2
    rows = records.merge_results(cfg["agents_dir"], t0=coord.t0)
    assert {r["kind"] for r in rows} == {"kv"} and {r["src"] for r in rows} == {"gpu1"}
    assert all(r["verified"] for r in rows)
    import csv

    with open(tmp_path / "requests.csv") as fh:
        served = [r for r in csv.DictReader(fh) if r["ttft_s"]]
    assert served
    parts = ("prefill_queue_s", "prefill_compute_s", "prefill_exchange_s", "kv_transfer_s", "decode_wait_s",
             "decode_compute_s", "decode_exchange_s")
    for r in served:
        assert sum(float(r[k]) for k in parts) == pytest.approx(float(r["ttft_s"]), abs=1e-9)
        assert float(r["prefill_exchange_s"]) == 0.0


def test_the_config_carries_sessions_hash_ids_and_the_cache_and_memory_settings(tmp_path):
    """What prepare_live writes for an agentic run: request rows from Request.to_row and the spec's new keys,
    read back into the same requests and ServingSpec fields (no agents needed)."""
    from traffic.model import workloads

    cfg = config(tmp_path)
    reqs = workloads.agentic_coding(30, seed=2)
    cfg["requests"] = json.loads(json.dumps([r.to_row() for r in reqs]))
    cfg["spec"] |= {"dtype": "fp8", "prefix_cache": True, "prefix_hit": 0.9, "decode_prefix_cache": True,
                    "decode_memory": True, "gpu": "h200", "decode_kv_tokens": 262_144, "think_s": 0.0}
    assert coordinator.requests_from_config(cfg) == reqs
    spec = coordinator.spec_from_config(cfg)
    assert (spec.prefix_cache, spec.prefix_hit, spec.decode_prefix_cache, spec.decode_memory, spec.gpu,
            spec.decode_kv_tokens) == (True, 0.9, True, True, "h200", 262_144)
    old_rows = {**cfg, "requests": [[1, 0.0, 100, 5], [2, 0.5, 200, 6]]}  # the four-number rows of before
    assert [r.session for r in coordinator.requests_from_config(old_rows)] == [None, None]
