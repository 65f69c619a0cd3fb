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
import os
import platform
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from common.paths import REPO as ROOT
from tests.support.frames import build_frame
from tests.support.ports import free_port
from traffic.model.errors import TrafficError
from traffic.runtime import agent as ag
from traffic.runtime import orders, sender, wire
from traffic.runtime.records import COLUMNS, merge_results, read_jsonl, retry_counts, write_plans

SENDER, NEAR = "127.0.0.1", "127.0.0.1"  # the planned port pair
ALT = ("127.0.0.3", "127.0.0.2")  # the other port pair: its source, and FAR, where a receiver agent listens
FAR = ALT[1]
RESET = re.compile(r"ConnectionResetError|BrokenPipeError")  # what an RST does to a send or a recv


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


class _Peer:
    """A receiver in threads on ``host``: resets its first ``resets`` connections after 64 KiB (SO_LINGER 0
    sends an RST, as when a path dies under a connection), ends the next ``eofs`` with a FIN while it reads
    nothing, acks frames on the later ones, each ack's crc flag forced off unless ``crc_ok``."""

    def __init__(self, host: str, resets: int = 0, crc_ok: bool = True, eofs: int = 0) -> None:
        self.resets, self.crc_ok, self.eofs = resets, crc_ok, eofs
        self.accepted = 0
        self.acked: list[int] = []
        self.lst = socket.socket()
        self.lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the RST lands mid-payload
        self.lst.bind((host, 0))
        self.lst.listen(16)
        self.lst.settimeout(0.05)
        self.port = self.lst.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.lst.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            target = (self._reset if self.accepted <= self.resets else
                      self._eof if self.accepted <= self.resets + self.eofs else self._ack)
            threading.Thread(target=target, args=(conn,), daemon=True).start()

    def _reset(self, conn: socket.socket) -> None:
        got = 0
        while got < 65_536 and (data := conn.recv(65_536)):
            got += len(data)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    def _eof(self, conn: socket.socket) -> None:
        time.sleep(0.2)  # the sender is stuck in a send on a full window by now
        conn.shutdown(socket.SHUT_WR)
        self._stop.wait()
        conn.close()

    def _ack(self, conn: socket.socket) -> None:
        decoder = wire.FrameDecoder()
        with conn:
            while data := conn.recv(262_144):
                for f in decoder.feed(data, time.monotonic()):
                    self.acked.append(f.id)
                    conn.sendall(wire.ACK.pack(wire.ACK_MAGIC, f.id, f.received, f.crc_ok and self.crc_ok))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.lst.close()


@contextlib.contextmanager
def _peer(host: str, resets: int = 0, crc_ok: bool = True, eofs: int = 0):
    peer = _Peer(host, resets, crc_ok, eofs)
    try:
        yield peer
    finally:
        peer.close()


def _transfer(tid: int, port: int, nbytes: int = 2_000_000, start: float = 0.0,
              alt: tuple[str, str] | None = None) -> orders.PlannedTransfer:
    """A transfer planned SENDER -> NEAR:port, with ``alt`` as its other port pair."""
    return orders.PlannedTransfer(tid, None, "gpu1", "gpu2", SENDER, NEAR, port, nbytes, start, *(alt or (None, None)))


async def _run(tmp: Path, plan: list[orders.PlannedTransfer], receiver_port: int | None = None,
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


async def _coordinate(tmp: Path, orders: list[dict], listen: list[tuple[str, int]] = (), before_stop=None,
                     **kw) -> list[dict]:
    """Run one control-mode agent against a stand-in coordinator on a Unix socket that orders ``orders``,
    awaits ``before_stop()`` if given, then orders stop; every report line the agent sent."""
    path = os.path.join(tempfile.mkdtemp(prefix="tb-ctl-"), "c.sock")  # a Unix socket path has at most 107 bytes
    reports: list[dict] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()  # hello
        due = time.monotonic()
        writer.write(b"".join(json.dumps(o | {"op": "send", "due": due}).encode() + b"\n" for o in orders))
        if before_stop is not None:
            await before_stop()
        writer.write(b'{"op":"stop"}\n')
        while line := await reader.readline():
            reports.append(json.loads(line))

    server = await asyncio.start_unix_server(handle, path)
    agent = ag.Agent("gpu1", list(listen), [], str(tmp), None, control=path, **kw)
    await asyncio.wait_for(agent.run(asyncio.Event()), 30)
    await asyncio.sleep(0.05)  # the reports of the last loop turn
    server.close()
    return reports


def _order(tid: int, port: int, alt: tuple[str, str] | None = None) -> dict:
    order = {"id": tid, "request_id": None, "src": "gpu1", "dst": "gpu2", "src_ip": SENDER, "dst_ip": NEAR,
             "dst_port": port, "bytes": 300_000, "start": 0.0}
    return order | ({"alt_src_ip": alt[0], "alt_dst_ip": alt[1]} if alt else {})


def _sent(tmp: Path) -> dict[int, dict]:
    return {r["id"]: r for r in read_jsonl(tmp / "gpu1.sent.jsonl")}


MODES = ["persistent", "per-transfer"]


# --------------------------------------------------------------------------- the other port pair in plans

LINE = {"id": 3, "src": "gpu1", "src_ip": "10.1.0.1", "dst_ip": "10.2.0.2", "dst_port": 7000, "bytes": 9,
        "start": 0.5}


def test_plan_lines_and_orders_carry_the_other_port_pair():
    alt = {"alt_src_ip": "10.2.0.1", "alt_dst_ip": "10.1.0.2"}
    t = orders.parse_plan_line("p:1", json.dumps(LINE | alt), "gpu1")
    assert (t.src_ip, t.dst_ip, t.alt_src_ip, t.alt_dst_ip) == ("10.1.0.1", "10.2.0.2", "10.2.0.1", "10.1.0.2")
    assert orders.parse_plan_line("p:1", json.dumps(LINE), "gpu1").alt_src_ip is None
    o = orders.order_transfer(LINE | alt | {"op": "send", "due": 12.5}, "gpu1")
    assert (o.start, o.alt_src_ip, o.alt_dst_ip) == (12.5, "10.2.0.1", "10.1.0.2")
    assert orders.order_transfer(LINE | {"due": 1.0}, "gpu1").alt_dst_ip is None


@pytest.mark.parametrize("alt,message", [({"alt_src_ip": "10.2.0.1"}, "alt_src_ip without alt_dst_ip"),
                                         ({"alt_dst_ip": "10.1.0.2"}, "alt_dst_ip without alt_src_ip"),
                                         ({"alt_src_ip": "10.2.0.1", "alt_dst_ip": "10.1.0"}, "alt_dst_ip '10.1.0'")])
def test_half_or_bad_alternative_pair_is_rejected_naming_it(alt: dict, message: str):
    with pytest.raises(orders.AgentError, match=message):
        orders.parse_plan_line("p:1", json.dumps(LINE | alt), "gpu1")
    with pytest.raises(orders.AgentError, match=message):
        orders.order_transfer(LINE | alt | {"due": 1.0}, "gpu1")


def test_write_plans_keeps_the_other_pair_and_rejects_half_of_it(tmp_path: Path):
    alt = {"alt_src_ip": "10.2.0.1", "alt_dst_ip": "10.1.0.2"}
    path = write_plans([LINE | alt], tmp_path)["gpu1"]
    assert read_jsonl(path) == [LINE | alt]
    with pytest.raises(TrafficError, match="both or neither"):
        write_plans([LINE | {"alt_src_ip": "10.2.0.1"}], tmp_path)


# --------------------------------------------------------------------------- dead connections

def test_every_sender_socket_gets_the_user_timeout():
    sock = sender.bound_socket(SENDER, 0.25)
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 250
    finally:
        sock.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_connect_nobody_answers_fails_as_dead_within_dead_after(tmp_path: Path, mode: str):
    with _blackhole(NEAR) as port:
        asyncio.run(_run(tmp_path, [_transfer(1, port)], connections=mode, dead_after=0.3,
                         transfer_timeout=10.0))
    rec = _sent(tmp_path)[1]
    assert rec["ok"] is False and rec["retried"] is True and rec["moved"] is False  # no other pair: same one again
    # both attempts ended on the 0.3 s dead-connection bound, not on the 10 s transfer timeout (its error would
    # be the transfer's timeout, and there would have been no second attempt)
    assert re.fullmatch(r"retry failed: TimeoutError: .*connect not done within 0\.3 s.* \(first: TimeoutError: "
                        r".*connect not done within 0\.3 s.*\)", rec["error"]), rec


@pytest.mark.parametrize("mode", MODES)
def test_a_connect_nobody_answers_is_retried_on_the_other_pair(tmp_path: Path, mode: str):
    with _blackhole(NEAR) as port:
        asyncio.run(_run(tmp_path, [_transfer(1, port, alt=ALT)], port, connections=mode, dead_after=0.3,
                         transfer_timeout=10.0))
    rec = _sent(tmp_path)[1]
    assert rec["ok"] is True and rec["retried"] is True and rec["moved"] is True, rec
    assert "connect not done within 0.3 s" in rec["first_error"]
    assert (rec["sent_src_ip"], rec["sent_dst_ip"]) == ALT


def _kernel_at_least(major: int, minor: int) -> bool:
    nums = platform.release().split("-")[0].split(".")
    return tuple(int(n) for n in nums[:2] if n.isdigit()) >= (major, minor)


@pytest.mark.skipif(not _kernel_at_least(5, 11), reason="TCP_USER_TIMEOUT covers a shut window since about Linux 5.11")
@pytest.mark.parametrize("mode", MODES)
def test_data_left_unacknowledged_fails_the_connection_with_etimedout(tmp_path: Path, mode: str):
    """Through the agent's own sockets: the kernel aborts once data waits dead_after unacknowledged."""
    with _stalled(NEAR) as port:
        asyncio.run(_run(tmp_path, [_transfer(1, port, nbytes=8_000_000)], connections=mode,
                         dead_after=0.3, transfer_timeout=10.0))
    rec = _sent(tmp_path)[1]
    # the kernel aborted both attempts with ETIMEDOUT (errno 110: TCP_USER_TIMEOUT), each once connected; the
    # 10 s transfer timeout would have ended the transfer once, with no retry
    assert rec["ok"] is False and rec["error"].startswith("retry failed: TimeoutError: [Errno 110]"), rec
    assert rec["first_error"].startswith("TimeoutError: [Errno 110]") and rec["retried"] is True
    assert rec["connected"] is not None


# --------------------------------------------------------------------------- command line

@pytest.mark.parametrize("flag,value", [("--dead-after", "0"), ("--dead-after", "nan"), ("--dead-after", "x"),
                                        ("--dead-hold", "-1"), ("--dead-hold", "inf")])
def test_a_bad_dead_connection_flag_is_one_line_naming_it(tmp_path: Path, flag: str, value: str):
    plan = tmp_path / "p.jsonl"
    plan.write_text("")
    argv = [sys.executable, "-m", "traffic.runtime.agent", "--name", "gpu1", "--listen", "127.0.0.1:0", "--plan",
            str(plan), "--out", str(tmp_path), "--t0", "0", flag, value]
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=10)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert flag in res.stderr


# --------------------------------------------------------------------------- retry once

@pytest.mark.parametrize("mode", MODES)
def test_a_reset_connection_is_retried_once_on_the_other_pair_and_verified(tmp_path: Path, mode: str):
    with _peer(NEAR, resets=99) as near:
        asyncio.run(_run(tmp_path, [_transfer(1, near.port, alt=ALT)], near.port, connections=mode))
    rec = _sent(tmp_path)[1]
    assert rec["ok"] is True and rec["error"] is None and rec["acked_bytes"] == 2_000_000, rec
    assert rec["retried"] is True and RESET.match(rec["first_error"]), rec
    assert (rec["src_ip"], rec["dst_ip"]) == (SENDER, NEAR)  # the plan as it was
    assert (rec["sent_src_ip"], rec["sent_dst_ip"]) == ALT and rec["moved"] is True
    assert near.accepted == 1 and near.acked == []
    [got] = read_jsonl(tmp_path / "gpu2.recv.jsonl")
    assert got["id"] == 1 and got["verified"] is True and got["bytes"] == 2_000_000
    assert got["peer"].split(":")[0] == ALT[0]  # it came from the other pair's source address


@pytest.mark.parametrize("mode", MODES)
def test_a_retry_that_fails_too_names_both_errors(tmp_path: Path, mode: str):
    with _peer(NEAR, resets=99) as near:  # nothing listens on the other pair: refused
        asyncio.run(_run(tmp_path, [_transfer(1, near.port, alt=ALT)], connections=mode))
    rec = _sent(tmp_path)[1]
    assert rec["ok"] is False and rec["retried"] is True and rec["moved"] is True, rec
    assert re.fullmatch(r"retry failed: ConnectionRefusedError: .* \(first: (ConnectionResetError|BrokenPipeError)"
                        r": .*\)", rec["error"]), rec["error"]
    assert RESET.match(rec["first_error"])


@pytest.mark.parametrize("mode", MODES)
def test_without_another_pair_the_retry_takes_a_fresh_connection_on_the_same_one(tmp_path: Path, mode: str):
    with _peer(NEAR, resets=1) as near:
        asyncio.run(_run(tmp_path, [_transfer(1, near.port)], connections=mode))
    rec = _sent(tmp_path)[1]
    assert rec["ok"] is True and rec["retried"] is True and rec["moved"] is False, rec
    assert (rec["sent_src_ip"], rec["sent_dst_ip"]) == (SENDER, NEAR)
    assert near.accepted == 2 and near.acked == [1]


@pytest.mark.parametrize("mode", MODES)
def test_a_bad_crc_is_not_retried(tmp_path: Path, mode: str):
    with _peer(NEAR, crc_ok=False) as near:
        asyncio.run(_run(tmp_path, [_transfer(1, near.port, alt=ALT)], near.port, connections=mode))
    rec = _sent(tmp_path)[1]
    assert rec["ok"] is False and rec["error"] == "receiver reported a crc mismatch", rec
    assert (rec["retried"], rec["first_error"], rec["moved"]) == (False, None, False)
    assert near.accepted == 1 and read_jsonl(tmp_path / "gpu2.recv.jsonl") == []  # nothing went to the other pair


def test_a_failing_persistent_connection_retries_everything_queued_or_in_flight_on_it(tmp_path: Path):
    with _peer(NEAR, resets=99) as near:
        plan = [_transfer(i, near.port, nbytes=500_000, alt=ALT) for i in range(1, 6)]
        asyncio.run(_run(tmp_path, plan, near.port))
    sent = _sent(tmp_path)
    assert all(r["ok"] and r["retried"] and r["moved"] for r in sent.values()), sent
    assert near.accepted == 1  # one connection failed them all; none reconnected to the dead pair
    got = read_jsonl(tmp_path / "gpu2.recv.jsonl")
    assert sorted(r["id"] for r in got if r["verified"]) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("mode", MODES)
def test_a_dead_pair_is_skipped_while_held(tmp_path: Path, mode: str):
    """The first transfer finds the planned pair dead and moves; the next goes straight to the other pair while
    the hold lasts (60 s: longer than the run, so no timing decides it). One connection to the dead pair only."""
    with _peer(NEAR, resets=99) as near:
        plan = [_transfer(1, near.port, alt=ALT), _transfer(2, near.port, start=0.25, alt=ALT)]
        asyncio.run(_run(tmp_path, plan, near.port, connections=mode, dead_hold=60.0))
    first, held = (_sent(tmp_path)[i] for i in (1, 2))
    assert all(r["ok"] and r["moved"] and (r["sent_src_ip"], r["sent_dst_ip"]) == ALT for r in (first, held))
    assert first["retried"] and RESET.match(first["first_error"])
    assert held["retried"] is False and held["first_error"] is None  # straight to the other pair
    assert near.accepted == 1


def test_the_planned_pair_is_tried_again_once_its_hold_is_over(tmp_path: Path, monkeypatch):
    """The route choice on a clock of our own: held until the hold's end, the planned pair from then on; not
    the other pair if that one is held too."""
    now = [100.0]
    monkeypatch.setattr(ag.time, "monotonic", lambda: now[0])
    agent = ag.Agent("gpu1", [], [], str(tmp_path), None, dead_hold=0.6)
    t = _transfer(1, 9, alt=ALT)
    agent._dead_until[(SENDER, NEAR)] = 100.0 + 0.6  # as _with_retry sets it on a dead connection at t=100
    route = agent._route(t)
    assert (route.src_ip, route.dst_ip) == ALT
    now[0] = 100.59
    assert (agent._route(t).src_ip, agent._route(t).dst_ip) == ALT
    now[0] = 100.6  # the hold is over
    assert (agent._route(t).src_ip, agent._route(t).dst_ip) == (SENDER, NEAR)
    now[0] = 100.3
    agent._dead_until[ALT] = 101.0  # both pairs held: the planned one
    assert (agent._route(t).src_ip, agent._route(t).dst_ip) == (SENDER, NEAR)
    plain = _transfer(2, 9)  # no other pair: always the planned one
    assert (agent._route(plain).src_ip, agent._route(plain).dst_ip) == (SENDER, NEAR)


def test_control_mode_reports_a_failure_after_a_retry_as_retried(tmp_path: Path):
    with _peer(NEAR, resets=99) as near, _peer(NEAR, crc_ok=False) as bad:
        reports = asyncio.run(_coordinate(tmp_path, [_order(1, near.port, alt=ALT), _order(2, bad.port)]))
    by_id = {r["id"]: r for r in reports}
    assert set(by_id) == {1, 2} and len(reports) == 2, reports
    assert by_id[1]["retried"] is True and by_id[1]["failed"].startswith("retry failed: ConnectionRefusedError")
    assert by_id[2] == {"id": 2, "failed": "receiver reported a crc mismatch"}  # as before: no retry, no key


def test_a_persistent_connection_closed_under_a_blocked_send_is_replaced_for_the_next_transfer(tmp_path: Path):
    """The reader sees the end while the writer waits on a full window: the writer must not be left behind."""
    with _peer(NEAR, eofs=1) as near:
        plan = [_transfer(1, near.port, nbytes=8_000_000), _transfer(2, near.port, nbytes=1000, start=0.6)]
        asyncio.run(_run(tmp_path, plan, transfer_timeout=3.0))
    first, second = _sent(tmp_path)[1], _sent(tmp_path)[2]
    assert first["ok"] is False and first["retried"] is False and "connection closed" in first["error"], first
    assert second["ok"] is True and second["retried"] is False, second["error"]  # not "timeout after 3 s"
    assert near.accepted == 2 and near.acked == [2]


def test_a_receiver_reports_whole_frames_only_and_leaves_cut_ones_to_the_sender(tmp_path: Path):
    """A frame cut by its connection's end is recorded, not reported: its sender retries it or reports the
    failure itself, and a coordinator told "arrived, not verified" would count a retried transfer failed."""
    port = free_port(FAR)

    async def clients() -> None:
        _, cut = await asyncio.open_connection(FAR, port)
        cut.write(build_frame(5, 100_000)[:30_000])
        cut.close()
        reader, whole = await asyncio.open_connection(FAR, port)
        whole.write(build_frame(6, 1000))
        await reader.readexactly(wire.ACK.size)
        whole.close()
        await asyncio.sleep(0.1)

    reports = asyncio.run(_coordinate(tmp_path, [], [(FAR, port)], before_stop=clients))
    assert [(r["id"], r["ok"]) for r in reports] == [(6, True)], reports
    recs = {r["id"]: r for r in read_jsonl(tmp_path / "gpu1.recv.jsonl")}
    assert recs[5]["verified"] is False and "of 100000 payload bytes" in recs[5]["error"]
    assert recs[6]["verified"] is True


# --------------------------------------------------------------------------- merge and summary

def test_merged_rows_and_the_replay_summary_count_retried_and_moved_transfers(tmp_path: Path):
    from testbed.backends.base import LinkSettings
    from testbed.repetition.writeup import summarize

    with _peer(NEAR, resets=99) as near:
        base = {"src": "gpu1", "dst": "gpu2", "src_ip": SENDER, "dst_port": near.port, "bytes": 300_000}
        alt = {"alt_src_ip": ALT[0], "alt_dst_ip": ALT[1]}
        lines = [base | alt | {"id": 1, "dst_ip": NEAR, "start": 0.0},   # reset: retried over the other pair
                 base | alt | {"id": 2, "dst_ip": NEAR, "start": 0.25},  # the planned pair is held: moved
                 base | {"id": 3, "dst_ip": FAR, "start": 0.3}]          # planned where the receiver is: plain
        plan = orders.read_plan(str(write_plans(lines, tmp_path)["gpu1"]), "gpu1")
        asyncio.run(_run(tmp_path, plan, near.port, dead_hold=5.0))
    rows = {r["id"]: r for r in merge_results(tmp_path)}
    assert all(r["verified"] for r in rows.values()), rows
    assert (rows[1]["retried"], rows[1]["moved"], rows[1]["sent_src_ip"]) == (True, True, ALT[0])
    assert RESET.match(rows[1]["first_error"])
    assert (rows[2]["retried"], rows[2]["moved"], rows[2]["first_error"]) == (False, True, None)
    assert tuple(rows[3]) == COLUMNS  # nothing happened to it: the row is as it always was
    summary = summarize("zcube", list(rows.values()), LinkSettings(1e9, 1500, 18000, 60000, 1_514_000, 400e9), 0,
                        {}, [])
    assert (summary["verified"], summary["failed"]) == (3, 0)
    assert (summary["transfers_retried"], summary["transfers_moved"]) == (1, 2)


def test_retry_counts_count_the_rows_resent_and_those_moved_to_the_other_pair():
    rows = [{"retried": True, "moved": True}, {"retried": True, "moved": False}, {}, {"retried": "", "moved": None}]
    assert retry_counts(rows) == (2, 1) and retry_counts([]) == (0, 0)
# -- hosted agents (traffic.runtime.host): the ack by callback, the timeout by a sweep, the retry by a task
async def _hosted(tmp: Path, transfers: list[orders.PlannedTransfer], receiver_port: int | None = None,
                  **kw) -> list[dict]:
    """Order ``transfers`` on a hosted agent (on_report set; a receiver agent on FAR:receiver_port if given) and
    settle; every report the sender made."""
    reports: list[dict] = []
    receiver = None
    if receiver_port is not None:
        receiver = ag.Agent("gpu2", [(FAR, receiver_port)], [], str(tmp), None)
        await receiver.bind()
    agent = ag.Agent("gpu1", [], [], str(tmp), 0.0, on_report=reports.append, **kw)
    for t in transfers:
        agent.order(t)
    await agent.settle(10)
    await agent.shutdown(asyncio.create_task(asyncio.sleep(0)))
    if receiver is not None:
        await receiver.shutdown(asyncio.create_task(asyncio.sleep(0)))
    return reports


def test_a_hosted_transfer_that_is_never_acked_times_out_by_the_sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(ag, "SWEEP_S", 0.05)
    with _stalled(NEAR) as port:
        reports = asyncio.run(_hosted(tmp_path, [_transfer(1, port, nbytes=1000)], transfer_timeout=0.3))
    sent = _sent(tmp_path)[1]
    assert sent["ok"] is False and sent["error"] == "timeout after 0.3 s"
    assert reports == [{"id": 1, "failed": "timeout after 0.3 s"}]


def test_a_hosted_transfer_on_a_reset_connection_is_sent_again_on_the_other_pair(tmp_path):
    with _peer(NEAR, resets=99) as near:
        reports = asyncio.run(_hosted(tmp_path, [_transfer(2, near.port, alt=ALT)], near.port))
    rec = _sent(tmp_path)[2]
    assert rec["ok"] is True and rec["retried"] is True and rec["moved"] is True, rec
    assert (rec["sent_src_ip"], rec["sent_dst_ip"]) == ALT and reports == []
