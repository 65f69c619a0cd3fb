"""Traffic agent on loopback: framing and crc checks, real multi-agent replays, failures, CLI.

No root: every "NIC port" is a distinct 127/8 address (Linux routes all of
127/8 to lo) with a port the OS found free. Runs stay short (about 2 s) and
light, since the machine may be shared.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.errors import TestbedError
from common.paths import REPO as ROOT
from tests.support.frames import build_frame
from tests.support.ports import free_port
from traffic.model.metrics import percentile
from traffic.runtime import agent as ag
from traffic.runtime import orders, sender, wire
from traffic.runtime.records import (
    COLUMNS,
    NEVER_COMPLETED,
    merge_results,
    read_jsonl,
    start_lateness,
    write_plans,
    write_transfers_csv,
)

# --------------------------------------------------------------------------- helpers

def _agent_cmd(name: str, listen: list[str], plan: Path, out: Path, t0: float, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "traffic.runtime.agent", "--name", name, "--plan", str(plan), "--out", str(out),
           "--t0", repr(t0), "--ready-file", str(out / f"{name}.ready"), *extra]
    for address in listen:
        cmd += ["--listen", address]
    return cmd


def _wait_for(paths: list[Path], deadline: float, procs: list[subprocess.Popen]) -> None:
    while not all(p.exists() for p in paths):
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"agent exited early with {proc.returncode}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {[str(p) for p in paths if not p.exists()]}")
        time.sleep(0.02)


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _replay(tmp_path: Path, transfers_for, n_agents: int, *extra: str, lead_s: float = 0.8):
    """Start ``n_agents`` agents with two addresses each, replay, SIGTERM after done; return (rows, rcs)."""
    names = [f"gpu{i}" for i in range(1, n_agents + 1)]
    addrs = {name: [f"127.0.0.{2 * i + 2}", f"127.0.0.{2 * i + 3}"] for i, name in enumerate(names)}
    ports = {name: [free_port(a) for a in addrs[name]] for name in names}
    transfers = transfers_for(names, addrs, ports)
    plans = write_plans(transfers, tmp_path, agents=names)
    t0 = time.monotonic() + lead_s
    procs = [subprocess.Popen(_agent_cmd(n, [f"{a}:{p}" for a, p in zip(addrs[n], ports[n])], plans[n],
                                         tmp_path, t0, *extra),
                              cwd=ROOT, stderr=subprocess.PIPE, text=True) for n in names]
    try:
        # the agents fix t0 at launch, so the orchestrator's check is "all bound before t0"
        _wait_for([tmp_path / f"{n}.ready" for n in names], t0, procs)
        last = max(t["start"] for t in transfers)
        _wait_for([tmp_path / f"{n}.done" for n in names], t0 + last + 10, procs)
    finally:
        _stop(procs)
    return merge_results(tmp_path, t0), [p.returncode for p in procs], [p.stderr.read() for p in procs]


def _random_transfers(count: int, span_s: float, seed: int = 7):
    def make(names, addrs, ports):
        rng = random.Random(seed)
        out = []
        for i in range(count):
            src, dst = rng.sample(names, 2)
            port = rng.choice((0, 1))
            out.append({"id": 1000 + i, "request_id": i // 3, "src": src, "dst": dst,
                        "src_ip": addrs[src][port], "dst_ip": addrs[dst][1 - port],
                        "dst_port": ports[dst][1 - port],
                        "bytes": int(1000 * 2000 ** rng.random()),  # log-uniform 1 KB .. 2 MB
                        "start": round(rng.uniform(0.0, span_s), 4)})
        return out
    return make


# --------------------------------------------------------------------------- framing (pure)

def test_payload_is_deterministic_and_crc_is_incremental():
    import zlib
    for tid, n in [(1, 0), (2, 1), (3, 65_536), (4, 200_000)]:
        data = b"".join(wire.payload_pieces(tid, n))
        assert len(data) == n
        assert data == b"".join(wire.payload_pieces(tid, n))
        assert wire.payload_crc(tid, n) == zlib.crc32(data)
    assert bytes(wire.pattern(1)) != bytes(wire.pattern(2))


def test_decoder_verifies_frames_split_anywhere():
    stream = build_frame(1, 100_000) + build_frame(2, 0) + build_frame(3, 7)
    dec, got = wire.FrameDecoder(), []
    for i in range(0, len(stream), 977):           # odd cuts through headers and payloads
        got += dec.feed(stream[i:i + 977], now=float(i))
    assert [(r.id, r.received, r.verified) for r in got] == [(1, 100_000, True), (2, 0, True), (3, 7, True)]
    assert got[0].first_byte == 0.0 and got[0].last_byte > 0
    assert dec.close(1e9, "closed") is None


def test_wrong_crc_is_flagged_not_verified():
    good = wire.payload_crc(9, 50_000)
    [r] = wire.FrameDecoder().feed(build_frame(9, 50_000, crc=good ^ 1), now=0.0)
    assert (r.id, r.received, r.crc_ok, r.verified) == (9, 50_000, False, False)


def test_truncated_frame_and_bad_magic():
    dec = wire.FrameDecoder()
    assert dec.feed(build_frame(4, 10_000)[:5_000], now=1.0) == []
    cut = dec.close(2.0, "connection closed")
    assert cut is not None and not cut.verified and cut.id == 4 and cut.received == 5_000 - wire.HEADER.size
    assert "of 10000 payload bytes" in cut.error
    with pytest.raises(wire.FrameError):
        wire.FrameDecoder().feed(b"XXXX" + bytes(wire.HEADER.size), now=0.0)


def test_receiver_acks_a_bad_crc_and_records_it(tmp_path: Path):
    """In-process agent: a frame with a wrong crc gets a crc-fail ack and a verified=false record."""
    async def scenario() -> bytes:
        agent = ag.Agent("gpu1", [("127.0.0.1", 0)], [], str(tmp_path), time.monotonic())
        [address] = await agent.bind()
        host, port = address.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(build_frame(77, 3_000, crc=123))
        ack = await reader.readexactly(wire.ACK.size)
        writer.close()
        await agent.shutdown(asyncio.create_task(asyncio.sleep(0)))
        return ack

    ack = asyncio.run(scenario())
    assert wire.ACK.unpack(ack) == (wire.ACK_MAGIC, 77, 3_000, 0)
    plan = orders.PlannedTransfer(77, None, "gpu2", "gpu1", "127.0.0.1", "127.0.0.1", 1, 3_000, 0.0)
    assert sender.check_ack(ack, plan) == (3_000, "receiver reported a crc mismatch")
    [rec] = read_jsonl(tmp_path / "gpu1.recv.jsonl")
    assert (rec["id"], rec["bytes"], rec["crc_ok"], rec["verified"]) == (77, 3_000, False, False)


# --------------------------------------------------------------------------- real replays

def test_three_agents_replay_and_merge(tmp_path: Path):
    dead_port = free_port("127.0.0.1")
    make_random = _random_transfers(60, 1.5)

    def make(names, addrs, ports):
        out = make_random(names, addrs, ports)
        out.append({"id": 5, "request_id": 99, "src": names[0], "dst": "nobody", "src_ip": addrs[names[0]][0],
                    "dst_ip": "127.0.0.1", "dst_port": dead_port, "bytes": 4096, "start": 0.2})
        return out

    rows, rcs, errs = _replay(tmp_path, make, 3)
    assert rcs == [0, 0, 0], errs
    assert len(rows) == 61 and all(tuple(r) == COLUMNS for r in rows)
    good = [r for r in rows if r["id"] != 5]
    bad = next(r for r in rows if r["id"] == 5)
    assert all(r["verified"] and r["error"] is None for r in good), [r for r in good if not r["verified"]]
    assert all(r["received_bytes"] == r["bytes"] for r in good)
    assert all(r["start"] <= r["first_byte"] <= r["end"] <= r["sender_end"] for r in good)
    assert not bad["verified"] and "refused" in bad["error"].lower()
    # every agent wrote a sent record per planned transfer, flushed before it exited
    assert sum(len(read_jsonl(p)) for p in tmp_path.glob("*.sent.jsonl")) == 61
    late = start_lateness(rows)
    p50, p99 = percentile(late, 50), percentile(late, 99)
    print(f"\nstart lateness over {len(late)} transfers: P50 {p50 * 1e3:.2f} ms, P99 {p99 * 1e3:.2f} ms, "
          f"max {max(late) * 1e3:.2f} ms")
    # events, not durations: none started before its time, and each agent started its transfers in their order
    assert min(late) >= 0
    for src in {r["src"] for r in rows}:
        mine = sorted((r for r in rows if r["src"] == src and r["start"] is not None),
                      key=lambda r: (r["scheduled_start"], r["id"]))
        assert all(a["start"] <= b["start"] for a, b in zip(mine, mine[1:])
                   if a["scheduled_start"] < b["scheduled_start"])
    assert write_transfers_csv(rows, tmp_path / "transfers.csv") == 61
    header = (tmp_path / "transfers.csv").read_text().splitlines()[0]
    assert header == ",".join(COLUMNS)


def test_stream_io_mode_also_verifies(tmp_path: Path):
    rows, rcs, errs = _replay(tmp_path, _random_transfers(12, 0.3, seed=3), 2, "--io", "stream")
    assert rcs == [0, 0], errs
    assert len(rows) == 12 and all(r["verified"] for r in rows)


def _connections_used(tmp_path: Path) -> dict[tuple[str, str], set[str]]:
    """(sender address, receiver address) -> the sender-side ip:port of every connection it used."""
    used: dict[tuple[str, str], set[str]] = {}
    for p in tmp_path.glob("*.recv.jsonl"):
        for r in read_jsonl(p):
            used.setdefault((r["peer"].rsplit(":", 1)[0], r["local"]), set()).add(r["peer"])
    return used


def test_persistent_connections_carry_every_transfer_of_a_port_pair_and_verify(tmp_path: Path):
    rows, rcs, errs = _replay(tmp_path, _random_transfers(40, 0.6, seed=5), 2)
    assert rcs == [0, 0], errs
    assert len(rows) == 40 and all(r["verified"] for r in rows), [r["error"] for r in rows if not r["verified"]]
    used = _connections_used(tmp_path)
    assert used and all(len(conns) == 1 for conns in used.values()), used
    assert sum(1 for r in rows if r["error"] is None) == 40


def test_per_transfer_connections_open_one_connection_each(tmp_path: Path):
    rows, rcs, errs = _replay(tmp_path, _random_transfers(12, 0.3, seed=5), 2, "--connections", "per-transfer")
    assert rcs == [0, 0], errs
    assert all(r["verified"] for r in rows)
    assert sum(len(c) for c in _connections_used(tmp_path).values()) == 12


def test_a_refused_persistent_connection_fails_its_transfers_and_the_next_one_retries(tmp_path: Path):
    dead_port = free_port("127.0.0.1")

    def make(names, addrs, ports):
        return [{"id": i, "request_id": i, "src": names[0], "dst": "nobody", "src_ip": addrs[names[0]][0],
                 "dst_ip": "127.0.0.1", "dst_port": dead_port, "bytes": 4096, "start": 0.1 * i} for i in range(3)]

    rows, rcs, errs = _replay(tmp_path, make, 2)
    assert rcs == [0, 0], errs
    assert len(rows) == 3 and all(not r["verified"] and "refused" in r["error"].lower() for r in rows)


def test_sigterm_records_unstarted_transfers_and_exits_0(tmp_path: Path):
    port = free_port("127.0.0.2")
    plan = write_plans([{"id": 1, "src": "gpu1", "dst": "gpu1", "src_ip": "127.0.0.2", "dst_ip": "127.0.0.2",
                         "dst_port": port, "bytes": 10, "start": 3600.0}], tmp_path)["gpu1"]
    proc = subprocess.Popen(_agent_cmd("gpu1", [f"127.0.0.2:{port}"], plan, tmp_path, time.monotonic()),
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for([tmp_path / "gpu1.ready"], time.monotonic() + 10, [proc])
        assert json.loads((tmp_path / "gpu1.ready").read_text())["listen"] == [f"127.0.0.2:{port}"]
    finally:
        _stop([proc])
    assert proc.returncode == 0, proc.stderr.read()
    [sent] = read_jsonl(tmp_path / "gpu1.sent.jsonl")
    assert sent["ok"] is False and "not started" in sent["error"]
    assert not (tmp_path / "gpu1.done").exists()
    [row] = merge_results(tmp_path)
    assert not row["verified"] and "not started" in row["error"]


# --------------------------------------------------------------------------- merge and plans

def test_merge_keeps_transfers_without_records(tmp_path: Path):
    base = {"src": "gpu1", "dst": "gpu2", "src_ip": "10.1.0.1", "dst_ip": "10.2.0.2", "dst_port": 7000,
            "bytes": 100}
    write_plans([{**base, "id": 1, "start": 0.5}, {**base, "id": 2, "start": 0.1}], tmp_path,
                agents=["gpu2"])
    assert (tmp_path / "gpu2.plan.jsonl").read_text() == ""
    t0 = 1000.0
    (tmp_path / "gpu1.sent.jsonl").write_text(json.dumps(
        {"id": 1, "scheduled_start": t0 + 0.5, "start": t0 + 0.501, "end": t0 + 0.6, "ok": True,
         "error": None}) + "\n")
    (tmp_path / "gpu2.recv.jsonl").write_text(json.dumps(
        {"id": 1, "bytes": 100, "first_byte": t0 + 0.52, "last_byte": t0 + 0.55, "verified": True,
         "error": None}) + "\n" + '{"id": 2, "byt')   # cut-off last line, as after a crash
    rows = merge_results(tmp_path)
    assert [r["id"] for r in rows] == [2, 1]
    assert rows[0]["verified"] is False and rows[0]["error"] == NEVER_COMPLETED
    assert rows[1]["verified"] is True and rows[1]["start"] == pytest.approx(0.501)
    assert rows[1]["end"] == pytest.approx(0.55) and rows[1]["sender_end"] == pytest.approx(0.6)


def test_write_plans_rejects_duplicates_and_missing_keys(tmp_path: Path):
    t = {"id": 1, "src": "gpu1", "src_ip": "10.1.0.1", "dst_ip": "10.2.0.2", "dst_port": 7000, "bytes": 1,
         "start": 0.0}
    with pytest.raises(TestbedError, match="twice"):
        write_plans([t, t], tmp_path)
    with pytest.raises(TestbedError, match="lacks start"):
        write_plans([{k: v for k, v in t.items() if k != "start"}], tmp_path)


# --------------------------------------------------------------------------- command line

@pytest.mark.parametrize("bad", [
    ["--listen", "127.0.0:7000"],
    ["--listen", "127.0.0.1:70000"],
    ["--t0", "nan"],
    ["--transfer-timeout", "0"],
    ["--plan", "/nonexistent/plan.jsonl"],
    ["--bogus"],
    ["--clock-offset", "inf"],
    ["--clock-offset", "0.5"],  # with --plan: a plan's t0 is already on the agent's clock
])
def test_bad_argument_exits_2_with_one_line(tmp_path: Path, bad: list[str]):
    plan = tmp_path / "p.jsonl"
    plan.write_text("")
    args = {"--name": "gpu1", "--listen": "127.0.0.1:0", "--plan": str(plan), "--out": str(tmp_path),
            "--t0": "0"}
    if bad[0] in args:
        args[bad[0]] = bad[1]
        bad = []
    argv = [x for kv in args.items() for x in kv] + bad
    res = subprocess.run([sys.executable, "-m", "traffic.runtime.agent", *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=10)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "error" in res.stderr


def test_bad_plan_line_exits_2_naming_the_line(tmp_path: Path):
    plan = tmp_path / "p.jsonl"
    plan.write_text(json.dumps({"id": 1, "src": "gpu1", "src_ip": "10.1.0.1", "dst_ip": "10.2.0.2",
                                "dst_port": 7000, "bytes": -1, "start": 0}) + "\n")
    res = subprocess.run([sys.executable, "-m", "traffic.runtime.agent", "--name", "gpu1", "--listen", "127.0.0.1:0",
                          "--plan", str(plan), "--out", str(tmp_path), "--t0", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=10)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert f"{plan}:1: bytes -1" in res.stderr


def test_agent_imports_only_the_standard_library():
    code = ("import sys, traffic.runtime.agent; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy','testbed','pandas')))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=10,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.stdout.strip() == "[]", res.stderr
