"""The twin carries the agents' wire format (traffic.runtime.wire): a frame header before each message and the
receiver's ack back for each whole frame, written as the agents write them (traffic.runtime.sender.Channel): a
small message on an idle, connected connection in one write (header and payload in one segment), otherwise the
header on its own first. So a link counts the bytes the emulator's links count. 100-byte messages on an idle
ZCube n=16."""

from __future__ import annotations

from common.scale import HEADER_BYTES
from fabrics import addressing, build_fabric
from fabrics.datapath import DatapathConfig
from testbed.backends.base import LinkSettings
from testbed.backends.ns3 import apps, engine, plan, summarise
from traffic.runtime import wire
from traffic.runtime.sender import FAST_PATH_BYTES

LINK = LinkSettings.of(DatapathConfig().validate(), 200e9)
HANDSHAKE = HEADER_BYTES + 60  # the handshake's ACK and the SYN with its options (at most 60 B over 66)
ONE_PURE_ACK = 20 + HEADER_BYTES  # at most one pure ACK more (for the first message's ack)


def carried(messages: list[tuple[float, int]]) -> tuple[int, int, list[dict]]:
    """Send (start, bytes) messages gpu5:p1 -> gpu1:p2 on the twin: the sender NIC's frame bytes, the ack bytes
    back, the merged rows."""
    fabric = build_fabric("zcube", gpus=16)
    engine.load()
    engine.configure(LINK.mtu, 0)
    built = plan.build(fabric, LINK, None, 0)
    src, dst = (5, 1), (1, 2)
    rows = [{"id": i, "src": f"gpu{src[0]}", "dst": f"gpu{dst[0]}", "src_ip": addressing.ip_of(*src),
             "dst_ip": addressing.ip_of(*dst), "bytes": n, "start": start} for i, (start, n) in enumerate(messages)]
    try:
        sent, sampler = apps.carry(built, rows)
        merged = summarise.merged_rows(sent, built.twin, key=lambda i, _r: i)
        counters = summarise.counters(built, sampler)
        acks = int(built.twin.acksReceived)
    finally:
        del built.twin
        engine.load().Destroy()
    return counters.link_bytes()[f"gpu{src[0]}:p{src[1]}"][1], acks, merged


def test_a_small_message_on_an_idle_connection_is_one_segment():
    nic, acks, merged = carried([(1.0, 100), (2.0, 100)])  # the connection opened at 0: connected and idle
    assert all(r["verified"] for r in merged)
    assert acks == wire.ACK.size  # the first message's ack came back (the run stops at the last delivery)
    per_message = wire.HEADER.size + 100 + HEADER_BYTES  # header and payload in one segment
    # the header on its own would add 66 B a message: 132 B over the upper bound
    assert 2 * per_message + HANDSHAKE <= nic <= 2 * per_message + HANDSHAKE + ONE_PURE_ACK


def test_a_message_before_the_connection_is_up_has_its_header_alone():
    # at 0 the connection is still opening: the agents' writer connects, then writes the header and the payload
    # with two sendall calls; the second message finds it idle
    nic, _, merged = carried([(0.0, 100), (2.0, 100)])
    assert all(r["verified"] for r in merged)
    two_writes = (wire.HEADER.size + HEADER_BYTES) + (100 + HEADER_BYTES)
    one_write = wire.HEADER.size + 100 + HEADER_BYTES
    assert two_writes + one_write + HANDSHAKE <= nic <= two_writes + one_write + HANDSHAKE + ONE_PURE_ACK


def test_a_message_over_the_fast_path_has_its_header_alone():
    # above FAST_PATH_BYTES the agents' writer sends the header, then the payload: the header is a segment of
    # its own, so the frames are one more than the payload's full segments need
    n = FAST_PATH_BYTES + 1
    big, _, merged = carried([(1.0, n)])
    small, _, _ = carried([(1.0, FAST_PATH_BYTES)])
    assert all(r["verified"] for r in merged)
    # one payload byte more, one segment more (the header's), up to a pure ACK's difference
    assert HEADER_BYTES + 1 <= big - small <= HEADER_BYTES + 1 + ONE_PURE_ACK
