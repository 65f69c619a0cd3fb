"""What the twin assumes where it and the emulator could differ, the knobs of issue 38's ablation: the shaper's
burst, the delays of cables, switches and senders, and the hosts' TCP. The defaults are the twin as built
(docs/twin.md); the experiment's ``twin`` section (``testbed.repetition.settings.Twin``) takes them from here,
and the twin reads either (the same names)."""

from __future__ import annotations

from dataclasses import dataclass

# ns-3's congestion controls the twin offers -> their TypeId (Linux's default: cubic)
TCP = {"cubic": "ns3::TcpCubic", "newreno": "ns3::TcpNewReno", "linux-reno": "ns3::TcpLinuxReno",
       "bic": "ns3::TcpBic", "htcp": "ns3::TcpHtcp", "vegas": "ns3::TcpVegas"}


@dataclass(frozen=True)
class Assumptions:
    """One run's assumptions (times on the emulator's clock: simulated time here)."""

    burst_bytes: int | None = None  # a token bucket per transmitter at the link rate; None: none
    cable_delay_us: float = 2.0  # propagation per cable
    hop_delay_us: float = 0.0  # a switch's forwarding time per packet before its egress queue
    send_delay_us: float = 0.0  # from the cluster's send to the write on the socket
    # from a queue's XOFF/XON crossing to the hold/release at the upstream transmitter, beyond the cable: a
    # MAC's (IEEE 802.3's bound at 100 Gb/s, pfc.NIC_REACTION_S); the emulator's pause daemon takes ~0.3 ms
    pause_reaction_us: float = 2.0
    tcp: str = "cubic"  # a key of TCP
    delack_count: int = 2  # Linux: every second segment
    # Linux's delayed ACK is at most 40 ms after a quiet spell (TCP_DELACK_MIN, quick-ack); ns-3's default
    # 200 ms equals the minimum RTO, so a message's last odd segment waited for a spurious RTO and the
    # connection's next message crawled from cwnd 1 (a 17 KB KV slice took 1.35 s instead of 64 ms)
    delack_timeout_ms: float = 40.0
    initial_cwnd: int = 10  # segments (Linux: 10)
    min_rto_ms: float = 200.0  # Linux: 200 ms


DEFAULT = Assumptions()
