"""Every fabric queue's counters from one raw netlink qdisc dump per namespace, decoded with ``struct``.

The queue sampler reads each queue's bfifo leaf (backlog, qlen, drops, packets, bytes) about once a second
during a repetition. Through pyroute2 that cost 28-93 % of a core in the main process of a default run
(py-spy: ~70 % of its samples decoding every qdisc's every attribute into Python objects), on a machine
where one core is OVS's. Here each namespace gets one NETLINK_ROUTE socket, opened once (setns, create,
come back: a socket stays in its namespace) and kept; a sample sends one RTM_GETQDISC dump per namespace and
reads only the tcmsg's ifindex and the TCA_KIND and TCA_STATS2 (basic, queue) attributes of each qdisc. The
interface indexes are resolved once, from one RTM_GETLINK dump per namespace, when the reader opens.

``rows`` gives exactly the rows ``fabricctl``'s pyroute2 reader gave (tests/unit/emulation/test_qstats.py
checks this on a saved dump): a queue whose device or bfifo is gone has no counter keys.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct

NETLINK_ROUTE = 0
RTM_GETLINK, RTM_GETQDISC = 18, 38
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
RTA = struct.Struct("=HH")  # len, type
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
IFLA_IFNAME = 3
BASIC = struct.Struct("=QI")  # bytes, packets (struct gnet_stats_basic, packed)
QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
LEAF = b"bfifo"
RECV_BYTES = 1 << 20


class NetlinkError(OSError):
    """The kernel refused a dump (its errno)."""


def _align(n: int) -> int:
    return (n + 3) & ~3


def messages(data: bytes):
    """(type, payload) of every netlink message in ``data`` (one or more recv()s of a dump)."""
    off, end = 0, len(data)
    while off + NLMSG.size <= end:
        length, kind, _flags, _seq, _pid = NLMSG.unpack_from(data, off)
        if length < NLMSG.size:
            break
        yield kind, data[off + NLMSG.size:off + length]
        off += _align(length)


def _attrs(data: bytes, off: int):
    """(type, start, end) of each rtattr from ``off`` to the end of ``data``."""
    end = len(data)
    while off + RTA.size <= end:
        length, kind = RTA.unpack_from(data, off)
        if length < RTA.size:
            break
        yield kind & 0x3FFF, off + RTA.size, off + length
        off += _align(length)


def leaf_stats(dump: bytes) -> dict[int, dict]:
    """ifindex -> the counters of its bfifo qdisc (the last one when there were several), from a qdisc dump."""
    out: dict[int, dict] = {}
    for kind, body in messages(dump):
        if kind != 36:  # RTM_NEWQDISC
            continue
        _family, ifindex, _handle, _parent, _info = TCMSG.unpack_from(body, 0)
        leaf = False
        stats: dict = {}
        for akind, start, end in _attrs(body, TCMSG.size):
            if akind == TCA_KIND:
                leaf = body[start:end].rstrip(b"\0") == LEAF
            elif akind == TCA_STATS2:
                nested = body[start:end]
                for skind, s, _e in _attrs(nested, 0):
                    if skind == TCA_STATS_BASIC:
                        stats["bytes"], stats["packets"] = BASIC.unpack_from(nested, s)
                    elif skind == TCA_STATS_QUEUE:
                        qlen, backlog, drops, _rq, _ol = QUEUE.unpack_from(nested, s)
                        stats.update(qlen=qlen, backlog=backlog, drops=drops)
        if leaf and stats:
            out[ifindex] = stats
    return out


def link_index(dump: bytes) -> dict[str, int]:
    """Interface name -> ifindex, from a link dump."""
    out = {}
    for kind, body in messages(dump):
        if kind != 16:  # RTM_NEWLINK
            continue
        _family, _type, index, _flags, _change = IFINFOMSG.unpack_from(body, 0)
        for akind, start, end in _attrs(body, IFINFOMSG.size):
            if akind == IFLA_IFNAME:
                out[body[start:end].rstrip(b"\0").decode()] = index
    return out


def rows(queues: list[dict], index: dict[str, int], stats: dict[int, dict]) -> list[dict]:
    """The sampler's rows of one namespace's ``queues`` (the datapath plan's dicts: qid, towards, kind, dev)."""
    out = []
    for q in queues:
        row = {"queue": q["qid"], "towards": q["towards"], "kind": q["kind"]}
        idx = index.get(q["dev"])
        if idx is not None and idx in stats:
            s = stats[idx]
            row.update(backlog=s["backlog"], qlen=s["qlen"], drops=s["drops"], packets=s["packets"],
                       bytes=s["bytes"])
        out.append(row)
    return out


def _request(kind: int, seq: int, body: bytes) -> bytes:
    return NLMSG.pack(NLMSG.size + len(body), kind, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def dump(sock: socket.socket, kind: int, seq: int) -> bytes:
    """One whole dump (its messages' bytes, up to NLMSG_DONE) of ``kind`` on ``sock``."""
    body = TCMSG.pack(0, 0, 0, 0, 0) if kind == RTM_GETQDISC else IFINFOMSG.pack(0, 0, 0, 0, 0)
    sock.send(_request(kind, seq, body))
    parts = []
    while True:
        data = sock.recv(RECV_BYTES)
        if not data:
            raise NetlinkError(0, "netlink socket closed during a dump")
        parts.append(data)
        for mkind, payload in messages(data):
            if mkind == NLMSG_DONE:
                return b"".join(parts)
            if mkind == NLMSG_ERROR:
                err = -struct.unpack_from("=i", payload, 0)[0]
                if err:
                    raise NetlinkError(err, f"netlink dump {kind}: {os.strerror(err)}")


def open_socket(ns: str | None) -> socket.socket:
    """A NETLINK_ROUTE socket in namespace ``ns`` (None: this one)."""
    from testbed.emulation import netns

    with netns.inside(ns) if ns else contextlib.nullcontext():
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BYTES)
    sock.bind((0, 0))
    return sock


class QueueReader:
    """The fabric's queues, read again and again over sockets kept open (one per namespace)."""

    def __init__(self, queues: list[dict]) -> None:
        self.by_ns: dict[str | None, list[dict]] = {}
        for q in queues:
            self.by_ns.setdefault(q["netns"], []).append(q)
        self.socks: dict[str | None, socket.socket] = {}
        self.index: dict[str | None, dict[str, int]] = {}
        self.seq = 0
        try:
            for ns in self.by_ns:
                self.socks[ns] = open_socket(ns)
                self.index[ns] = link_index(self._dump(ns, RTM_GETLINK))
        except BaseException:
            self.close()
            raise

    def _dump(self, ns: str | None, kind: int) -> bytes:
        self.seq += 1
        return dump(self.socks[ns], kind, self.seq)

    def raw(self) -> dict[str | None, bytes]:
        """Each namespace's qdisc dump as it came (decoded by ``decode``)."""
        return {ns: self._dump(ns, RTM_GETQDISC) for ns in self.by_ns}

    def decode(self, raw: dict[str | None, bytes]) -> list[dict]:
        out = []
        for ns, queues in self.by_ns.items():
            out += rows(queues, self.index[ns], leaf_stats(raw[ns]))
        return out

    def read(self) -> list[dict]:
        return self.decode(self.raw())

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()
        self.socks.clear()

    def __enter__(self) -> "QueueReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
