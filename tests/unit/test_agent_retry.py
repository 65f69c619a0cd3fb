"""Traffic agent on loopback: dead connections (TCP_USER_TIMEOUT, connect bound), the retry on the other
port pair, the dead-pair hold, and what the records say about them.

No root and no mocked sockets: every failure is a real kernel one on 127/8. A connection reset is a test
server closing with SO_LINGER 0; a cut path on connect is a listener whose accept queue is full (Linux
drops the SYN, as a dead cable would); data that stays unacknowledged is a peer that never reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traffic import agent as ag
from traffic.errors import TrafficError
from traffic.replay_io import read_jsonl, write_plans

ROOT = Path(__file__).resolve().parents[2]
SENDER, NEAR, FAR = "127.0.0.1", "127.0.0.1", "127.0.0.2"  # FAR: the other port pair's receiver


# --------------------------------------------------------------------------- test peers

@contextlib.contextmanager
def _blackhole(host: str):
    """A listener whose one-slot accept queue is full: Linux drops every further SYN, so a connect to
    it hangs as over a cut cable; yields its port."""
    lst = socket.socket()
    lst.bind((host, 0))
    lst.listen(0)
    filler = socket.create_connection(lst.getsockname(), timeout=2)
    try:
        yield lst.getsockname()[1]
    finally:
        filler.close()
        lst.close()


@contextlib.contextmanager
def _stalled(host: str):
    """A listener with a 4 KiB receive buffer that never accepts nor reads: sent data stays
    unacknowledged behind a shut window; yields its port."""
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    lst.bind((host, 0))
    lst.listen(8)
    try:
        yield lst.getsockname()[1]
    finally:
        lst.close()


def _transfer(tid: int, port: int, nbytes: int = 2_000_000, start: float = 0.0) -> ag.PlannedTransfer:
    """A transfer planned SENDER -> NEAR:port."""
    return ag.PlannedTransfer(tid, None, "gpu1", "gpu2", SENDER, NEAR, port, nbytes, start)


async def _run(tmp: Path, plan: list[ag.PlannedTransfer], receiver_port: int | None = None,
               **kw) -> None:
    """Run a sender agent over ``plan`` until it is done (a receiver agent on FAR:receiver_port if given)."""
    receiver = None
    if receiver_port is not None:
        receiver = ag.Agent("gpu2", [(FAR, receiver_port)], [], str(tmp), None)
        await receiver.bind()
    sender = ag.Agent("gpu1", [], plan, str(tmp), time.monotonic() + 0.05, **kw)
    stop = asyncio.Event()
    runner = asyncio.create_task(sender.run(stop))
    try:
        async with asyncio.timeout(30):
            while not (tmp / "gpu1.done").exists():
                await asyncio.sleep(0.01)
    finally:
        stop.set()
        await runner
        if receiver is not None:
            await receiver.shutdown(asyncio.create_task(asyncio.sleep(0)))


def _sent(tmp: Path) -> dict[int, dict]:
    return {r["id"]: r for r in read_jsonl(tmp / "gpu1.sent.jsonl")}


MODES = ["persistent", "per-transfer"]


# --------------------------------------------------------------------------- the other port pair in plans

LINE = {"id": 3, "src": "gpu1", "src_ip": "10.1.0.1", "dst_ip": "10.2.0.2", "dst_port": 7000, "bytes": 9,
        "start": 0.5}


def test_plan_lines_and_orders_carry_the_other_port_pair():
    alt = {"alt_src_ip": "10.2.0.1", "alt_dst_ip": "10.1.0.2"}
    t = ag.parse_plan_line("p:1", json.dumps(LINE | alt), "gpu1")
    assert (t.src_ip, t.dst_ip, t.alt_src_ip, t.alt_dst_ip) == ("10.1.0.1", "10.2.0.2", "10.2.0.1", "10.1.0.2")
    assert ag.parse_plan_line("p:1", json.dumps(LINE), "gpu1").alt_src_ip is None
    o = ag.order_transfer(LINE | alt | {"op": "send", "due": 12.5}, "gpu1")
    assert (o.start, o.alt_src_ip, o.alt_dst_ip) == (12.5, "10.2.0.1", "10.1.0.2")
    assert ag.order_transfer(LINE | {"due": 1.0}, "gpu1").alt_dst_ip is None


@pytest.mark.parametrize("alt,message", [({"alt_src_ip": "10.2.0.1"}, "alt_src_ip without alt_dst_ip"),
                                         ({"alt_dst_ip": "10.1.0.2"}, "alt_dst_ip without alt_src_ip"),
                                         ({"alt_src_ip": "10.2.0.1", "alt_dst_ip": "10.1.0"}, "alt_dst_ip '10.1.0'")])
def test_half_or_bad_alternative_pair_is_rejected_naming_it(alt: dict, message: str):
    with pytest.raises(ag.AgentError, match=message):
        ag.parse_plan_line("p:1", json.dumps(LINE | alt), "gpu1")
    with pytest.raises(ag.AgentError, match=message):
        ag.order_transfer(LINE | alt | {"due": 1.0}, "gpu1")


def test_write_plans_keeps_the_other_pair_and_rejects_half_of_it(tmp_path: Path):
    alt = {"alt_src_ip": "10.2.0.1", "alt_dst_ip": "10.1.0.2"}
    path = write_plans([LINE | alt], tmp_path)["gpu1"]
    assert read_jsonl(path) == [LINE | alt]
    with pytest.raises(TrafficError, match="both or neither"):
        write_plans([LINE | {"alt_src_ip": "10.2.0.1"}], tmp_path)


# --------------------------------------------------------------------------- dead connections

def test_every_sender_socket_gets_the_user_timeout():
    sock = ag._bound_socket(SENDER, 0.25)
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 250
    finally:
        sock.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_connect_nobody_answers_fails_as_dead_within_dead_after(tmp_path: Path, mode: str):
    with _blackhole(NEAR) as port:
        t0 = time.monotonic()
        asyncio.run(_run(tmp_path, [_transfer(1, port)], connections=mode, dead_after=0.3,
                         transfer_timeout=10.0))
        took = time.monotonic() - t0
    rec = _sent(tmp_path)[1]
    assert rec["ok"] is False and "connect not done within 0.3 s" in rec["error"], rec
    assert took < 3.0  # the dead-connection bound, not the 10 s transfer timeout


def _kernel_at_least(major: int, minor: int) -> bool:
    nums = platform.release().split("-")[0].split(".")
    return tuple(int(n) for n in nums[:2] if n.isdigit()) >= (major, minor)


@pytest.mark.skipif(not _kernel_at_least(5, 11), reason="TCP_USER_TIMEOUT covers a shut window since Linux 5.11")
@pytest.mark.parametrize("mode", MODES)
def test_data_left_unacknowledged_fails_the_connection_with_etimedout(tmp_path: Path, mode: str):
    """Through the agent's own sockets: the kernel aborts once data waits dead_after unacknowledged."""
    with _stalled(NEAR) as port:
        t0 = time.monotonic()
        asyncio.run(_run(tmp_path, [_transfer(1, port, nbytes=8_000_000)], connections=mode,
                         dead_after=0.3, transfer_timeout=10.0))
        took = time.monotonic() - t0
    rec = _sent(tmp_path)[1]
    assert rec["ok"] is False and f"[Errno {ag.errno.ETIMEDOUT}]" in rec["error"], rec
    assert rec["connected"] is not None and took < 5.0


# --------------------------------------------------------------------------- command line

@pytest.mark.parametrize("flag,value", [("--dead-after", "0"), ("--dead-after", "nan"), ("--dead-after", "x")])
def test_a_bad_dead_connection_flag_is_one_line_naming_it(tmp_path: Path, flag: str, value: str):
    plan = tmp_path / "p.jsonl"
    plan.write_text("")
    argv = [sys.executable, "-m", "traffic.agent", "--name", "gpu1", "--listen", "127.0.0.1:0", "--plan",
            str(plan), "--out", str(tmp_path), "--t0", "0", flag, value]
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=10)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert flag in res.stderr
