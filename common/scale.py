"""The one scale model: an emulated link stands for a real one.

The default emulated link rate is the highest at which the fidelity benchmark
held its targets at n=32 on a 2-core machine (see README, "Fidelity"); one
such link stands for a real port of ``represents`` bit/s (``link.represents``,
default 400 Gbit/s). Bytes are scaled by represents / rate (``bytes_scale``)
and times stay real, so a transfer of B real bytes over the real link takes
as long as B / bytes_scale emulated bytes over the emulated one. Standing for
a slower real link puts more emulated bytes on the same emulated link: that
is how the network's intensity is a parameter (the seed's 100 vs 200 Gbit/s
ablation is the same experiment at two values).
"""

REAL_LINK_BPS = 400e9  # default of link.represents
DEFAULT_RATE_BPS = 3e6
DEFAULT_MTU = 3000
# Buffers cannot be scaled by bytes or by time (either gives far less than one
# packet); they are sized in packets, like a shallow switch buffer of ~40 MTUs
# per port, and must hold at least twice the shaper's burst.
DEFAULT_BUFFER_BYTES = 60000
# A host NIC's queue is the Linux qdisc in front of the wire: txqueuelen 1000
# packets, the kernel default, with TCP small queues keeping each socket to
# two frames in it. A switch-sized buffer there drops at the sender as soon
# as a NIC carries more than ~10 flows (measured: all-to-all n=16, 61k drops).
DEFAULT_NIC_QUEUE_PACKETS = 1000
DEFAULT_BURST_BYTES = 18000
# A packet on the wire: Ethernet 14 B around IPv4 20 B and TCP with timestamps 32 B, so a full packet
# carries mtu - 52 B of payload in mtu + 14 B of frame.
ETHERNET_HEADER_BYTES = 14
TCP_IP_HEADER_BYTES = 52
HEADER_BYTES = ETHERNET_HEADER_BYTES + TCP_IP_HEADER_BYTES  # per packet: 66


def bytes_scale(rate_bps: float = DEFAULT_RATE_BPS, real_bps: float = REAL_LINK_BPS) -> float:
    """Real bytes per emulated byte."""
    return real_bps / rate_bps


def payload_bytes(mtu: int) -> int:
    """TCP payload of a full packet (the MSS) at this MTU."""
    return max(1, mtu - TCP_IP_HEADER_BYTES)
