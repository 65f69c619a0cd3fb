"""PFC across hosts: the frame on the wire, the sender's reference counts and refreshes, and the
pause daemon's handling of frames from another host (no root: fake sockets and a fake table)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pfc import pfcd, tbfmsg, xpfc
from pfc.bpfmaps import QSTATE_WORDS, F


def test_frame_is_an_802_1qbb_frame_with_our_padding():
    f = xpfc.frame(0xFFFF, 123456789012, "sw6:13")
    assert len(f) == 60  # minimum Ethernet frame without FCS
    assert f[:6] == bytes.fromhex("0180c2000001") and f[12:14] == b"\x88\x08"
    assert struct.unpack_from("!HHH", f, 14) == (0x0101, 0x0001, 0xFFFF)
    assert f[20:34] == b"\0" * 14  # priorities 1..7: no pause
    assert xpfc.parse(f) == xpfc.Pause(0xFFFF, 123456789012, "sw6:13")
    assert xpfc.parse(xpfc.frame(0, 5, "spine16:32")) == xpfc.Pause(0, 5, "spine16:32")


def test_frames_that_are_not_ours_are_ignored():
    assert xpfc.parse(tbfmsg.pfc_frame(b"\x02\xff\x00\x00\x00\x02", 0xFFFF)) is None  # a kick frame
    f = bytearray(xpfc.frame(1, 1, "x"))
    f[17] = 0x02  # priority 0 not enabled
    assert xpfc.parse(bytes(f)) is None
    assert xpfc.parse(b"\0" * 60) is None
    with pytest.raises(ValueError):
        xpfc.frame(1, 1, "a-queue-name-too-long")


def test_quanta_are_512_bit_times():
    assert xpfc.quanta_ns(0xFFFF, 3e6) == 11_184_640_000  # 65535 x 512 / 3e6 s
    assert xpfc.quanta_ns(1, 1e9) == 512


class FakeSock:
    def __init__(self, dev="", inbox=None):
        self.dev, self.sent, self.inbox = dev, [], list(inbox or [])
        self._fd = id(self) % 100000

    def send(self, b):
        self.sent.append(b)

    def recvfrom(self, n):
        if not self.inbox:
            raise BlockingIOError
        return self.inbox.pop(0)

    def fileno(self):
        return self._fd

    def close(self):
        pass


def test_sender_counts_causes_and_refreshes():
    now = [0]
    socks = {}

    def opener(dev):
        socks[dev] = FakeSock(dev)
        return socks[dev]

    r = xpfc.RemoteFeeders({"sw1:9": "tbt7", "gpu17:p2": "tbt40"}, 3e6, opener, clock=lambda: now[0])
    assert r.hold("sw1:9", "sw6:13", 100) is True
    assert r.hold("sw1:9", "sw6:14", 200) is False  # a second cause: no second frame
    assert [xpfc.parse(b).quanta for b in socks["tbt7"].sent] == [0xFFFF]
    assert r.release("sw1:9", "sw6:13", 300) is False
    now[0] = r.refresh_ns
    assert r.refresh() == 1 and xpfc.parse(socks["tbt7"].sent[-1]) == xpfc.Pause(0xFFFF, 100, "sw6:13")
    assert r.release("sw1:9", "sw6:14", 400) is True
    assert xpfc.parse(socks["tbt7"].sent[-1]) == xpfc.Pause(0, 400, "sw6:14")
    assert r.release("sw1:9", "sw6:14", 500) is False  # nothing held: nothing sent
    assert r.sent == {"xoff": 1, "xon": 1, "refresh": 1, "errors": 0}
    assert r.refresh_ns == xpfc.quanta_ns(0xFFFF, 3e6) // 4


def test_receiver_skips_outgoing_and_foreign_frames():
    mine = xpfc.frame(0xFFFF, 42, "sw6:13")
    inbox = [(mine, ("tbt7", 0x0003, 4, 1, b"")),  # outgoing: our own send
             (tbfmsg.pfc_frame(b"\x02\xff\x00\x00\x00\x02", 0xFFFF), ("tbt7", 3, 0, 1, b"")),  # a kick frame
             (mine, ("tbt7", 3, 0, 1, b""))]
    rx = xpfc.Receiver({"tbt7": "sw1:9"}, open_socket=lambda dev: FakeSock(dev, inbox))
    assert rx.read() == [("tbt7", xpfc.Pause(0xFFFF, 42, "sw6:13"))]
    assert (rx.frames, rx.ignored) == (1, 1)


# --------------------------------------------------------------- the daemon
class FakeTx:
    def __init__(self, qid, slot):
        node, port = qid.split(":")
        self.qid, self.slot, self.node, self.node_type = qid, slot, node, 1
        self.port = int(port.lstrip("p"))
        self.holders, self.changes = 0, []
        self.resume_item, self.resumes, self.cut_short = None, 0, -1
        self.pause_cross_ns = self.pause_notice_ns = 0
        self.pause_cause, self.kick_due = "", False
        self.pause_msg, self.resume_msg = b"P", b"R"
        self.deq_at_change = self.deq_after_kick = 0

    def change(self, msg):
        self.changes.append(msg)


def _daemon(policy: dict, tx: dict, rx=None, remote=None):
    """A PauseDaemon without the kernel: a numpy table, fake transmitters."""
    d = object.__new__(pfcd.PauseDaemon)
    d.policy = policy
    d.cfg = pfcd.DaemonConfig.from_policy(policy)

    class Table:
        table = np.zeros((16, QSTATE_WORDS), dtype=np.uint64)

    d.table = Table()
    d.tx = tx
    d.held, d.pending, d.log, d.lat_log = {}, [], [], []
    d.kicks = __import__("collections").deque()
    d.stats = pfcd.LoopStats()
    d.remote, d.rx, d.rx_ready = remote, rx, False
    d.remote_until, d.remote_offset_ns = {}, 0

    class Seen:
        table = np.zeros((16, 8), dtype=np.uint64)

    d.seen = Seen()
    d._pause = lambda tx: tx.change(tx.pause_msg)
    d._kick_later = lambda tx: None
    d._pause_latency = lambda tx: None
    return d


POLICY_A = {"rate_bps": 3e6, "mtu": 3000, "burst_bytes": 18000, "poll_us": 500, "nics": {},
            "queues": {"sw1:9": {"kind": "switch", "dev": "sw1-eth9", "netns": None, "peer": "sw1-eth9r",
                                 "limit": 60000}}}


def test_a_frame_from_another_host_pauses_and_resumes_its_transmitter():
    xoff = xpfc.frame(0xFFFF, 1_000, "sw6:13")
    xon = xpfc.frame(0, 5_000, "sw6:13")
    inbox = [(xoff, ("tbt7", 3, 0, 1, b"")), (xoff, ("tbt7", 3, 0, 1, b""))]  # the second: a refresh
    rx = xpfc.Receiver({"tbt7": "sw1:9"}, open_socket=lambda dev: FakeSock(dev, inbox))
    tx = {"sw1:9": FakeTx("sw1:9", 0)}
    d = _daemon(POLICY_A, tx, rx=rx)
    d.rx_ready = True
    d.remote_step()
    t = tx["sw1:9"]
    assert (t.holders, t.changes, t.pause_cross_ns, t.pause_cause) == (1, [b"P"], 1_000, "sw6:13")
    assert d.log[0].split()[1:] == ["sw1", "1", "9", "1", "sw6:13"]  # logged with the remote queue as cause
    assert "cable:tbt7" in d.held and d.remote_until["cable:tbt7"] > 0
    rx.socks["tbt7"].inbox.append((xon, ("tbt7", 3, 0, 1, b"")))
    d.rx_ready = True
    d.remote_step()
    assert (t.holders, t.changes) == (0, [b"P", b"R"])
    assert d.log[1].split()[1:] == ["sw1", "1", "9", "0", "sw6:13"]
    kind, crossed = d.pending[-1][1], d.pending[-1][2]
    assert (kind, crossed) == ("resume", 5_000)  # resume latency measured from the remote XON crossing
    assert "cable:tbt7" not in d.held and not d.remote_until


def test_a_pause_whose_quanta_run_out_resumes():
    inbox = [(xpfc.frame(1, 0, "sw6:13"), ("tbt7", 3, 0, 1, b""))]  # 1 quantum: 171 us at 3 Mbit/s
    rx = xpfc.Receiver({"tbt7": "sw1:9"}, open_socket=lambda dev: FakeSock(dev, inbox))
    tx = {"sw1:9": FakeTx("sw1:9", 0)}
    d = _daemon(POLICY_A, tx, rx=rx)
    d.rx_ready = True
    d.remote_step()
    assert tx["sw1:9"].holders == 1
    d.remote_until["cable:tbt7"] = 0  # as if the time had passed
    d.remote_step()
    assert tx["sw1:9"].holders == 0 and d.log[-1].split()[-1] == "expired"


def test_a_local_crossing_pauses_a_feeder_on_another_host_by_frame():
    policy = {"rate_bps": 3e6, "mtu": 3000, "burst_bytes": 18000, "poll_us": 500, "nics": {},
              "queues": {"sw6:13": {"kind": "switch", "dev": "sw6-eth13", "netns": None, "peer": "sw6-eth13r",
                                    "limit": 90000, "xoff": 30000, "xon": 24000,
                                    "feeders": ["sw1:9", "sw6:1"], "sources": {}},
                         "sw6:1": {"kind": "switch", "dev": "sw6-eth1", "netns": None, "peer": "sw6-eth1r",
                                   "limit": 60000}}}
    socks = {}

    def opener(dev):
        socks[dev] = FakeSock(dev)
        return socks[dev]

    remote = xpfc.RemoteFeeders({"sw1:9": "tbt7"}, 3e6, opener)
    tx = {"sw6:1": FakeTx("sw6:1", 1), "sw6:13": FakeTx("sw6:13", 0)}
    d = _daemon(policy, tx, remote=remote)
    row = d.cfg.slot["sw6:13"]
    d.table.table[row, F["xoff_ns"]] = 777
    d._xoff("sw6:13", 1_000)
    assert xpfc.parse(socks["tbt7"].sent[0]) == xpfc.Pause(0xFFFF, 777, "sw6:13")
    assert tx["sw6:1"].holders == 1 and len(d.log) == 1  # the local feeder is logged here, the remote one there
    d.table.table[row, F["xon_ns"]] = 888
    d._xon("sw6:13", 2_000)
    assert xpfc.parse(socks["tbt7"].sent[1]) == xpfc.Pause(0, 888, "sw6:13")
    assert tx["sw6:1"].holders == 0
