"""traffic.runtime.bulk (many TCP flows from one process), traffic.runtime.cross (iperf3 cross traffic) and
traffic.runtime.netns (the one setns), on the loopback and without root."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from common.paths import REPO
from tests.support.ports import free_port
from traffic.runtime import bulk, netns

BULK = [sys.executable, str(REPO / "traffic" / "runtime" / "bulk.py")]


def test_bulk_counts_each_flow_inside_the_window():
    port = free_port()
    start = time.monotonic() + 0.5
    proc = subprocess.run([*BULK, "--listen", f"127.0.0.1:{port}", "--connect", f"127.0.0.1>127.0.0.1:{port}",
                           "--start", f"{start:.3f}", "--duration", "1.0", "--omit", "0.5", "--linger", "0.2"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc["received"]) == ["127.0.0.1>127.0.0.1"] and doc["received"]["127.0.0.1>127.0.0.1"] > 0
    assert doc["window_s"] == 0.5 and isinstance(doc["retransmits"], int) and doc["retransmits"] >= 0
    assert "bins" not in doc  # only with --bins-ms


def test_bulk_refuses_an_omit_as_long_as_the_run():
    proc = subprocess.run([*BULK, "--start", "0", "--duration", "2", "--omit", "2"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith("--omit 2.0 must be at least 0 and below --duration 2.0")


def test_tcp_info_reads_the_counters_of_a_connection():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname()) as client:
            peer, _ = server.accept()
            client.sendall(b"x" * 1000)
            assert peer.recv(1000)
            info = bulk.tcp_info(client)
            peer.close()
    assert set(info) == {"total_retrans", "bytes_acked", "bytes_retrans", "ca_state", "backoff", "rto_us"}
    assert info["total_retrans"] == 0 and info["bytes_retrans"] == 0
    assert info["backoff"] == 0 and info["ca_state"] == 0 and info["rto_us"] >= 200_000  # TCP's minimum RTO


def test_cross_client_without_a_server_reports_the_error_as_json():
    proc = subprocess.run([sys.executable, "-m", "traffic.runtime.cross", "client", "--bind", "127.0.0.1", "--to",
                           "127.0.0.1", "--port", str(free_port()), "--duration", "1"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["bytes"] == 0 and doc["bps"] == 0.0 and "unable to connect" in doc["error"]


def test_cross_client_needs_a_destination():
    proc = subprocess.run([sys.executable, "-m", "traffic.runtime.cross", "client", "--bind", "127.0.0.1", "--port",
                           "5201"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().endswith("error: client needs --to DST_IP")


def test_entering_a_missing_namespace_fails_and_leaves_this_thread_where_it_was():
    before = os.stat("/proc/self/ns/net").st_ino
    with pytest.raises(FileNotFoundError):
        with netns.inside("tb-no-such-namespace"):
            pass
    with pytest.raises(FileNotFoundError):
        netns.enter("tb-no-such-namespace")
    assert os.stat("/proc/self/ns/net").st_ino == before


def test_setns_on_something_that_is_not_a_namespace_names_it():
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        with pytest.raises(OSError, match=r"setns into /dev/null: Invalid argument"):
            netns._setns(fd, "/dev/null")
    finally:
        os.close(fd)
