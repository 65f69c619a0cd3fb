"""The control channel across hosts: the HMAC hello refuses what lacks the run's secret (and logs it),
relays carry an agent's stream unchanged, and the minimum-RTT clock estimate (values by hand)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from common.paths import REPO
from traffic.runtime import channel


def test_hello_round_trip_and_wrong_secret():
    secret, nonce = b"k" * 32, b"n" * 16
    line = channel.answer(secret, nonce, "ph2", "relay")
    assert channel.verify(secret, nonce, line) == ("ph2", "relay")
    with pytest.raises(channel.ChannelRefused, match="bad HMAC from 'ph2'"):
        channel.verify(b"x" * 32, nonce, line)
    with pytest.raises(channel.ChannelRefused, match="bad HMAC"):  # a replay under another nonce
        channel.verify(secret, b"m" * 16, line)
    with pytest.raises(channel.ChannelRefused, match="the hello is missing"):
        channel.verify(secret, nonce, b"GET /\r\n")
    with pytest.raises(channel.ChannelRefused, match="unknown purpose"):
        channel.verify(secret, nonce, f"ph2 shell {channel.mac(secret, nonce, 'ph2', 'shell')}\n".encode())
    assert channel.parse_challenge(channel.challenge(nonce)) == nonce
    with pytest.raises(channel.ChannelRefused, match="no TBCH1"):
        channel.parse_challenge(b"SSH-2.0-OpenSSH\r\n")


def test_min_rtt_estimate_by_hand():
    # round trips (send, remote, recv) in ns: RTTs 10 ms, 2 ms, 6 ms; the 2 ms one counts
    samples = [(0, 105_000_000, 10_000_000), (20_000_000, 122_000_000, 22_000_000),
               (30_000_000, 140_000_000, 36_000_000)]
    o = channel.estimate_offset(samples)
    assert o.rtt_ms == pytest.approx(2.0)
    assert o.uncertainty_ms == pytest.approx(1.0)
    assert o.offset_ms == pytest.approx(101.0)  # 122 - (20 + 22) / 2
    assert o.samples == 3
    with pytest.raises(ValueError):
        channel.estimate_offset([(5, 0, 1)])  # received before sent: unusable
    rel = channel.relative_to_first({"a": channel.Offset(10.0, 0.5, 1.0, 3), "b": channel.Offset(13.0, 0.25, 0.5, 3)},
                                    "a")
    assert rel["a"]["offset_ms"] == 0.0 and rel["b"] == {"offset_ms": 3.0, "uncertainty_ms": 0.75, "rtt_ms": 0.5,
                                                         "samples": 3}


def test_server_refuses_and_logs_unauthenticated_and_measures_clocks():
    logged = []
    secret = channel.new_secret()
    srv = channel.Server("127.0.0.1", secret, log=logged.append)
    try:
        with socket.create_connection(srv.address) as s:  # says nothing: refused after the hello timeout
            s.settimeout(10)
            assert s.recv(64).startswith(b"TBCH1 ")
            s.sendall(b"hello there\n")
            assert s.recv(64) == b""  # closed
        with pytest.raises(channel.ChannelRefused):
            channel.connect(srv.address, b"w" * 32, "ph9", "clock")
        deadline = time.monotonic() + 5
        while len(logged) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(logged) == 2 and all(line.startswith("control channel: refused 127.0.0.1:") for line in logged)
        assert "bad HMAC from 'ph9'" in logged[1]
        sock = channel.connect(srv.address, secret, "ph2", "clock")
        assert channel.answer_clock(sock) == channel.ROUNDS
        sock.close()
        est = srv.wait_clocks(["ph2"], timeout=5)["ph2"]
        assert abs(est.offset_ms) <= est.uncertainty_ms + 0.5  # one clock: offset ~0 within the round trip
    finally:
        srv.close()


def test_relay_carries_a_stream_through_the_authenticated_channel():
    secret = channel.new_secret()
    d = tempfile.mkdtemp()
    coord_path, agent_path = os.path.join(d, "coord.sock"), os.path.join(d, "agent.sock")
    coord = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    coord.bind(coord_path)
    coord.listen(4)
    srv = channel.Server("127.0.0.1", secret, unix_path=coord_path, log=lambda m: None)
    ready = threading.Event()
    threading.Thread(target=channel.relay, args=(agent_path, srv.address, secret, "ph2", ready.set),
                     daemon=True).start()
    assert ready.wait(5)
    try:
        agent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        agent.connect(agent_path)
        agent.sendall(b'{"hello": "gpu3"}\n')
        conn, _ = coord.accept()
        conn.settimeout(5)
        assert conn.recv(100) == b'{"hello": "gpu3"}\n'
        conn.sendall(b"order 1\n")
        agent.settimeout(5)
        assert agent.recv(100) == b"order 1\n"
        agent.close()
        conn.close()
        assert srv.refused == []
    finally:
        srv.close()
        coord.close()


def test_the_relay_command_ends_with_its_stdin_and_removes_its_socket(tmp_path):
    """A relay started over SSH must not outlive the channel that started it."""
    secret = channel.new_secret()
    (tmp_path / "secret").write_text(secret.hex())
    srv = channel.Server("127.0.0.1", secret, log=lambda m: None)
    sock = tmp_path / "control.sock"
    proc = subprocess.Popen([sys.executable, "-m", "traffic.runtime.channel", "relay", "--to",
                             f"127.0.0.1:{srv.address[1]}", "--secret-file", str(tmp_path / "secret"), "--name", "ph2",
                             "--unix", str(sock)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready" and sock.exists()
        proc.stdin.close()
        assert proc.wait(10) == 0
        assert not sock.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.close()
