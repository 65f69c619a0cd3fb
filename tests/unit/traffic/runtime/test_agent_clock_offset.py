"""An agent on another host than the coordinator (control mode, ``--clock-offset``): the orders' due times
move onto the agent's clock and the arrival times it reports move back onto the coordinator's. On loopback
with a fake coordinator (a Unix socket this test serves); no root."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from common.paths import REPO as ROOT
from tests.support.ports import free_port
from traffic.runtime.records import read_jsonl

OFFSET_S = 100.0  # "this host's clock is 100 s ahead of the coordinator's"


def test_orders_and_reports_are_moved_by_the_clock_offset(tmp_path: Path):
    sock_path = tmp_path / "control.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(sock_path))
    srv.listen(1)
    srv.settimeout(10)
    a, b = "127.0.0.20", "127.0.0.21"
    pa, pb = free_port(a), free_port(b)
    proc = subprocess.Popen([sys.executable, "-m", "traffic.runtime.agent", "--name", "gpu1", "--control",
                             str(sock_path), "--clock-offset", repr(OFFSET_S), "--out", str(tmp_path),
                             "--listen", f"{a}:{pa}", "--listen", f"{b}:{pb}"], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True)
    try:
        conn, _ = srv.accept()
        conn.settimeout(10)
        fh = conn.makefile("rwb")
        assert json.loads(fh.readline()) == {"hello": "gpu1"}
        due = time.monotonic()  # the coordinator's clock (this test's, which the agent shares)
        order = {"op": "send", "id": 7, "dst": "gpu1", "src_ip": a, "dst_ip": b, "dst_port": pb, "bytes": 50_000,
                 "due": due}
        fh.write((json.dumps(order) + "\n").encode())
        fh.flush()
        report = json.loads(fh.readline())
        after = time.monotonic()
        fh.write(b'{"op": "stop"}\n')
        fh.flush()
        assert proc.wait(20) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.close()
    assert report["id"] == 7 and report["ok"] is True
    # The agent's clock is really this test's, so its arrival time on its own clock lies between the order
    # and its report; it reports that time moved back by the offset it was given.
    assert due <= report["t"] + OFFSET_S <= after, (due, report["t"], after)
    sent, = read_jsonl(tmp_path / "gpu1.sent.jsonl")
    assert sent["scheduled_start"] == due + OFFSET_S  # due moved onto this host's clock
    recv, = read_jsonl(tmp_path / "gpu1.recv.jsonl")
    assert abs(recv["last_byte"] - OFFSET_S - report["t"]) < 1e-6  # the record stays on the agent's own clock
