"""The twin carries the agents' wire format (traffic.runtime.wire): a frame header before each message, sent on
its own as the agents' two writes with TCP_NODELAY send it, and the receiver's ack back for each whole frame;
so a link counts the bytes the emulator's links count. Two 100-byte messages on an idle ZCube n=16."""

from __future__ import annotations

from common.scale import HEADER_BYTES
from fabrics import addressing, build_fabric
from fabrics.datapath import DatapathConfig
from testbed.backends.base import LinkSettings
from testbed.backends.ns3 import apps, engine, plan, summarise
from traffic.runtime import wire

LINK = LinkSettings.of(DatapathConfig().validate(), 200e9)


def test_a_small_message_is_a_header_segment_a_payload_segment_and_an_ack_back():
    fabric = build_fabric("zcube", gpus=16)
    engine.load()
    engine.configure(LINK.mtu, 0)
    built = plan.build(fabric, LINK, None, 0)
    src, dst = (5, 1), (1, 2)
    rows = [{"id": i, "src": f"gpu{src[0]}", "dst": f"gpu{dst[0]}", "src_ip": addressing.ip_of(*src),
             "dst_ip": addressing.ip_of(*dst), "bytes": 100, "start": start} for i, start in enumerate((1.0, 2.0))]
    try:
        sent, sampler = apps.carry(built, rows)
        merged = summarise.merged_rows(sent, built.twin, key=lambda i, _r: i)
        counters = summarise.counters(built, sampler)
        acks = int(built.twin.acksReceived)
    finally:
        del built.twin
        engine.load().Destroy()
    assert all(r["verified"] for r in merged)
    assert acks == wire.ACK.size  # the first message's ack came back (the run stops at the last delivery)
    nic = counters.link_bytes()[f"gpu{src[0]}:p{src[1]}"][1]
    per_message = (wire.HEADER.size + HEADER_BYTES) + (100 + HEADER_BYTES)  # header alone, then the payload
    handshake = HEADER_BYTES + 60  # the handshake's ACK and the SYN with its options (at most 60 B over 66)
    # at most one pure ACK more (for the first message's ack); header and payload in one segment would be
    # 2 x 66 B less than the lower bound
    assert 2 * per_message + handshake <= nic <= 2 * per_message + handshake + 20 + HEADER_BYTES
