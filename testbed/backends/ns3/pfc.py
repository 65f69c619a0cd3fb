"""PFC on the twin: the emulator's policy (``pfc.policy``) as per-queue parameters of ``twin.cc``, and
the pause log it writes.

Semantics (docs/twin.md): one priority class. A switch egress queue whose backlog exceeds XOFF holds
every transmitter that has bytes in it (the upstream switch port or NIC port across the cable), and any
that adds bytes while it stays congested; each hold lands after the cable's delay. When the backlog falls
to XON the queue releases them (after the cable's delay too); a transmitter held by several queues
resumes when the last one releases it. Thresholds are static (``xoff_bytes``/``xon_bytes``) or dynamic
(``dynamic_alpha``: XOFF = max(floor, alpha x (the switch's shared pool - bytes queued in the whole
switch)), XON 2 frames below it, at least one frame). A queue's byte limit is the policy's ``limit``
(XOFF, or the highest dynamic XOFF, plus one headroom per feeding link), so a drop at a fabric queue
with PFC on means the headroom was wrong: the run fails (the lossless invariant).
"""

from __future__ import annotations

import dataclasses

from common.errors import TestbedError
from fabrics import Fabric
from pfc import policy
from testbed.backends.base import LinkSettings, PauseLog


@dataclasses.dataclass(frozen=True)
class QueueParams:
    limit: int  # bytes
    xoff: int  # bytes (dynamic: the floor); 0 without PFC
    xon: int


def resolve(pfc_cfg, link: LinkSettings) -> policy.ResolvedPfc | None:
    """The resolved PFC settings of a repetition, None when PFC is off."""
    if pfc_cfg is None or not getattr(pfc_cfg, "enabled", False):
        return None
    return policy.resolve(pfc_cfg, link.rate_bps, link.mtu, link.buffer_bytes)


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
