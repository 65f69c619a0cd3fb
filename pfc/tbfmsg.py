"""Pause and resume of one queue = one pre-built netlink message each.

A queue is tbf (rate R, burst B) over a bfifo. Changing a tbf refills its
bucket, so:
* pause  = change to rate PAUSE_RATE with a one-frame burst: the frame that
  is due leaves on the fresh bucket (and any that fit in what it leaves);
  a frame that does not fit waits for the missing bytes at 1 byte/s, so even
  one byte short it stays put for a second (at 1 kbit/s that was 8 ms, and
  such frames left well inside a pause), i.e. the queue holds;
* resume = change back to (R, B): a full bucket, no deficit to pay off.

The messages (RTM_NEWQDISC without CREATE/REPLACE = change, handle 1:, root)
are packed once with struct and sent on a raw NETLINK_ROUTE socket opened in
the queue's namespace: ~10 us a send instead of ~1 ms through pyroute2.
The rate spec says link layer "ethernet", so no rate table is needed, and
TCA_TBF_BURST gives the burst in bytes. The limit must repeat the bfifo's,
because tbf passes its limit on to a fifo child.
"""

from __future__ import annotations

import socket
import struct

RTM_NEWQDISC = 36
NLM_F_REQUEST, NLM_F_ECHO = 0x1, 0x8
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_BURST = 1, 6
TC_H_ROOT = 0xFFFFFFFF
TC_LINKLAYER_ETHERNET = 1
PAUSE_RATE_BPS = 8  # 1 byte/s, the lowest tbf takes. The kernel keeps the bucket in
# 64-bit ns (TCA_TBF_BURST); only tc's 32-bit dump overflows: a paused queue shows "burst 265b".


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def tbf_change(ifindex: int, rate_bps: float, burst_bytes: int, limit_bytes: int, seq: int = 0) -> bytes:
    """The netlink message that changes the root tbf (handle 1:) of ``ifindex``."""
    rate = struct.pack("BBHhHI", 0, TC_LINKLAYER_ETHERNET, 0, 0, 0, int(rate_bps // 8))
    peak = struct.pack("BBHhHI", 0, 0, 0, 0, 0, 0)
    qopt = rate + peak + struct.pack("III", limit_bytes, 0, 0)
    options = _attr(TCA_TBF_PARMS, qopt) + _attr(TCA_TBF_BURST, struct.pack("I", burst_bytes))
    body = struct.pack("BxxxiIII", socket.AF_UNSPEC, ifindex, 0x10000, TC_H_ROOT, 0)
    body += _attr(TCA_KIND, b"tbf\0") + _attr(TCA_OPTIONS | 0x8000, options)  # NLA_F_NESTED
    return struct.pack("IHHII", 16 + len(body), RTM_NEWQDISC, NLM_F_REQUEST, seq, 0) + body


def pfc_frame(src_mac: bytes, pause_quanta: int) -> bytes:
    """An IEEE 802.1Qbb PFC frame for priority 0 (quanta 0 = XON). Link-local
    (01:80:c2:00:00:01): a Linux bridge never forwards it, so sending one into
    a queue's device just wakes the queue up (and shows the resume to tcpdump)."""
    head = bytes.fromhex("0180c2000001") + src_mac + struct.pack("!H", 0x8808)
    body = struct.pack("!HH", 0x0101, 0x0001) + struct.pack("!H", pause_quanta) + b"\0" * 14
    return (head + body).ljust(60, b"\0")


def route_socket(timeout: float | None = 0.0) -> socket.socket:
    """A NETLINK_ROUTE socket in the calling thread's current network namespace
    (non-blocking by default: pause/resume sends never wait for an answer)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.bind((0, 0))
    sock.settimeout(timeout)
    return sock


def drain_errors(sock: socket.socket) -> list[int]:
    """Error codes the kernel sent back (we ask for no acks: only failures come)."""
    errors = []
    while True:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return errors
        off = 0
        while off + 16 <= len(data):
            length, kind = struct.unpack_from("IH", data, off)
            if kind == 2 and length >= 20:  # NLMSG_ERROR
                code = struct.unpack_from("i", data, off + 16)[0]
                if code:
                    errors.append(code)
            off += max(16, (length + 3) & ~3)


RTM_GETQDISC = 38
TCA_STATS2, TCA_STATS_QUEUE = 7, 3


def qdisc_get(ifindex: int, handle: int = 0x100000, seq: int = 1) -> bytes:
    """RTM_GETQDISC for one qdisc (no dump; the kernel unicasts the answer only with NLM_F_ECHO)."""
    body = struct.pack("BxxxiIII", socket.AF_UNSPEC, ifindex, handle, 0, 0)
    return struct.pack("IHHII", 16 + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_ECHO, seq, 0) + body


def _attrs(data: bytes, off: int, end: int):
    while off + 4 <= end:
        length, kind = struct.unpack_from("HH", data, off)
        if length < 4:
            return
        yield kind & 0x3FFF, off + 4, off + length
        off += (length + 3) & ~3


def queue_stats(sock: socket.socket, ifindex: int, handle: int = 0x100000) -> dict | None:
    """qlen, backlog (bytes) and drops of one qdisc, from a blocking route socket."""
    sock.send(qdisc_get(ifindex, handle))
    data = sock.recv(65536)
    length, kind = struct.unpack_from("IH", data, 0)
    if kind != RTM_NEWQDISC:
        return None
    for akind, start, end in _attrs(data, 16 + 20, length):
        if akind == TCA_STATS2:
            for skind, s0, _ in _attrs(data, start, end):
                if skind == TCA_STATS_QUEUE:
                    qlen, backlog, drops, _, _ = struct.unpack_from("IIIII", data, s0)
                    return {"qlen": qlen, "backlog": backlog, "drops": drops}
    return None
