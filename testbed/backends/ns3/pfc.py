"""PFC on the twin: the emulator's policy (``pfc.policy``) as per-queue parameters of ``twin.cc``, and
the pause log it writes.

Semantics (docs/twin.md): one priority class. A switch egress queue whose backlog exceeds XOFF holds
every transmitter that has bytes in it (the upstream switch port or NIC port across the cable), and any
that adds bytes while it stays congested; each hold lands a cable delay plus the upstream MAC's reaction
(``NIC_REACTION_S``, or twin.pause_reaction_us) later and stops the transmitter at a frame boundary. When
the backlog falls to XON the queue releases them (as late); a transmitter held by several queues
resumes when the last one releases it.
Thresholds are static (``xoff_bytes``/``xon_bytes``) or dynamic
(``dynamic_alpha``: XOFF = max(floor, alpha x (the switch's shared pool - bytes queued in the whole
switch)), XON 2 frames below it, at least one frame). Headroom per feeding link is a real switch's
(``headroom_need``): what the link can still deliver after the hold is decided. A queue's byte limit is the
policy's ``limit`` (XOFF, or the highest dynamic XOFF, plus one headroom per feeding link), and while a queue
is congested each feeding link may add at most its headroom; so a drop at a fabric queue with PFC on means
the headroom was wrong: the run fails (the lossless invariant).
"""

from __future__ import annotations

import dataclasses
import math

from common.errors import TestbedError
from fabrics import Fabric
from pfc import policy
from testbed.backends.base import LinkSettings, PauseLog

# How long a MAC takes to stop after a pause reaches it, beyond finishing the frame it is sending: IEEE 802.3
# bounds it (Annex 31B) by 394 pause quanta at 100 Gb/s (201,728 bit times, 2.0 us) and 905 at 400 Gb/s
# (463,360 bit times, 1.2 us); the twin takes 2 us for the 200 Gb/s NICs it stands for (docs/pfc.md, Headroom).
NIC_REACTION_S = 2e-6


def reaction_s(cable_delay_s: float, pause_reaction_s: float = NIC_REACTION_S) -> float:
    """From a crossing to the last byte its hold lets in: the pause's flight up the cable, the transmitter's
    reaction (``pause_reaction_s``: a MAC's by default), the flight of what it sent meanwhile back down (the
    frame on the wire besides: in the frames)."""
    return 2 * cable_delay_s + pause_reaction_s


def headroom_need(link: LinkSettings, cable_delay_s: float, pause_reaction_s: float = NIC_REACTION_S) -> int:
    """Headroom one feeding link needs, the vendors' formula for 802.1Qbb (Cisco's PFC white paper): 2 frames
    (one whose tail is still arriving when the pause is decided, one the MAC started before the pause reached
    it) + the link's rate x (2 x the cable delay + the reaction)."""
    return 2 * link.frame_bytes + math.ceil(link.rate_bps * reaction_s(cable_delay_s, pause_reaction_s) / 8)


@dataclasses.dataclass(frozen=True)
class QueueParams:
    limit: int  # bytes
    xoff: int  # bytes (dynamic: the floor); 0 without PFC
    xon: int


def resolve(pfc_cfg, link: LinkSettings, cable_delay_s: float,
            pause_reaction_s: float = NIC_REACTION_S) -> policy.ResolvedPfc | None:
    """The resolved PFC settings of a repetition on the twin, None when PFC is off. The reaction is the twin's
    (``reaction_s`` with ``pause_reaction_s``, twin.pause_reaction_us; not the emulator's pause daemon's
    ``reaction_ms``), the headroom per feeding link
    ``headroom_need`` unless given (a given one is checked against it); XOFF (its floor when dynamic) plus one
    headroom must fit in a port's buffer, as in a real switch's."""
    if pfc_cfg is None or not getattr(pfc_cfg, "enabled", False):
        return None
    need = headroom_need(link, cable_delay_s, pause_reaction_s)
    cfg = dataclasses.replace(pfc_cfg, reaction_ms=reaction_s(cable_delay_s, pause_reaction_s) * 1e3,
                              headroom_bytes=pfc_cfg.headroom_bytes if pfc_cfg.headroom_bytes is not None else need)
    resolved = policy.resolve(cfg, link.rate_bps, link.mtu, link.buffer_bytes)
    if resolved.xoff_bytes + resolved.headroom_bytes > link.buffer_bytes:
        raise TestbedError(f"pfc xoff {resolved.xoff_bytes} B + headroom {resolved.headroom_bytes} B do not fit in "
                           f"the {link.buffer_bytes} B buffer: expected xoff <= "
                           f"{link.buffer_bytes - resolved.headroom_bytes} B", key="xoff_bytes")
    return resolved


def queue_params(fabric: Fabric, link: LinkSettings, resolved: policy.ResolvedPfc | None) -> dict[str, QueueParams]:
    """Switch queue id ("sw3:4") -> its limit and thresholds, as the emulator's pause daemon uses them."""
    if resolved is None:
        return {f"{n}:{p}": QueueParams(link.buffer_bytes, 0, 0) for n, sw in fabric.switches.items()
                for p in sw.ports}
    return {q: QueueParams(t["limit"], t["xoff"], t["xon"]) for q, t in policy.thresholds(fabric, resolved).items()}


def shared_pool(fabric: Fabric, switch: str, resolved: policy.ResolvedPfc | None) -> int:
    """A switch's shared buffer for dynamic thresholds (0 when static or off)."""
    if resolved is None or resolved.dynamic_alpha is None:
        return 0
    return policy.shared_buffer(resolved, len(fabric.switches[switch].ports))


def record(resolved: policy.ResolvedPfc | None) -> dict:
    """The PFC settings as config.json records them."""
    return dataclasses.asdict(resolved) if resolved is not None else {"enabled": False}


def pause_log(resolved: policy.ResolvedPfc | None, text: str) -> PauseLog:
    """The twin's pause log (pfc.txt lines: ``time_ns node node_type port event cause``)."""
    if resolved is None:
        return PauseLog()
    return PauseLog(True, tuple(ln for ln in text.splitlines() if ln.strip()))


def check_lossless(resolved: policy.ResolvedPfc | None, fabric_drops: int) -> None:
    """With PFC on, a drop at a fabric queue fails the run (htsim's "LOSSLESS not working")."""
    if resolved is not None and fabric_drops:
        raise TestbedError(f"PFC is on but the twin dropped {fabric_drops} packets at switch queues: the lossless "
                           "invariant is broken (headroom or thresholds wrong)")
