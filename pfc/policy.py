"""PFC policy: thresholds, per-queue buffer limits and which queues feed which.

Pure logic, no root. The pause daemon (``pfcd``) executes what this computes: when a
switch egress queue's backlog crosses XOFF it pauses the queue's *feeders*
(the upstream egress queues whose traffic the routing can send into it), and
resumes them when the backlog drops below XON; a feeder held by several
congested queues resumes when the last lets go.

Real PFC pauses one priority of one ingress port; we pause the whole upstream
link queue (one priority), which is what makes head-of-line blocking and
victim flows.

Sizes (all bytes; ``frame`` = MTU + 14):

* headroom per feeding link >= 2 frames (one being sent when the pause lands,
  one the pause mechanism lets through: a paused tbf still releases the frame
  its fresh bucket allows) + what the link carries during the daemon's
  worst reaction time (``rate * reaction_ms``);
* xoff defaults to half the buffer, xon to xoff - 2 frames (at least 1 frame);
* or, with ``dynamic_alpha`` (Broadcom's dynamic threshold, the one HPCC's
  switches use): a switch's queues share one pool, ``shared`` = its ports x
  ``buffer``, and a queue's XOFF is ``alpha x (shared - bytes queued in the
  whole switch)``, never below 2 frames; XON is 2 frames below it (at least
  1 frame). The kernel computes it at every enqueue and departure. A queue
  alone on its switch can reach ``alpha x shared / (1 + alpha)``
  (``dynamic_xoff_max``); n congested queues each stop at
  ``alpha x shared / (1 + n alpha)``, so together they stay inside the pool;
* a queue's byte limit with PFC on is ``xoff + n_feeders * headroom``
  (``queue_limit``): a real switch reserves headroom per ingress port, so the
  bytes that arrive after XOFF from each feeding link still fit and PFC stays
  lossless. It can exceed ``buffer_bytes``: the headroom is on top of it.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import asdict, dataclass, fields

from common.errors import TestbedError
from fabrics import addressing
from fabrics.routing import ForwardingTables, egress_port_for, forwarding_tables
from fabrics.topology import Fabric

POLL_US_RANGE = (50, 5000)
DEFAULT_POLL_US = 500
DEFAULT_REACTION_MS = 2.0
MAX_DYNAMIC_ALPHA = 8.0
MIN_DYNAMIC_ALPHA = 1 / 128  # the kernel keeps alpha in 1/256 steps
HEADROOM_ROUND = 1000
ETH_HEADER = 14


@dataclass
class PfcConfig:
    """What the user asks for; ``None`` thresholds take the defaults of ``resolve``."""

    enabled: bool = True
    xoff_bytes: int | None = None
    xon_bytes: int | None = None
    headroom_bytes: int | None = None  # per feeding link
    dynamic_alpha: float | None = None  # dynamic threshold: xoff = alpha x the switch's free shared buffer
    poll_us: int = DEFAULT_POLL_US  # the daemon's poll interval, 50 .. 5000
    reaction_ms: float = DEFAULT_REACTION_MS  # assumed worst reaction time of the daemon (sizes the headroom)

    @classmethod
    def from_dict(cls, d: dict | None) -> "PfcConfig":
        """From an experiment's ``pfc`` section (``testbed.experiment.schema.pfc_settings``):
        ``None`` values keep the defaults, unknown keys are refused."""
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise TestbedError(f"pfc setting {unknown[0]!r} is unknown: expected one of {', '.join(sorted(known))}")
        return cls(**{k: v for k, v in d.items() if v is not None})


@dataclass(frozen=True)
class ResolvedPfc:
    """Validated PFC settings with every default filled in (bytes, bit/s)."""

    enabled: bool
    xoff_bytes: int
    xon_bytes: int
    headroom_bytes: int  # per feeding link
    min_headroom_bytes: int  # 2 frames + rate * reaction time
    frame_bytes: int  # mtu + 14
    buffer_bytes: int  # switch egress buffer without PFC
    rate_bps: float
    mtu: int
    poll_us: int
    reaction_ms: float
    dynamic_alpha: float | None = None  # None: static xoff/xon; else xoff/xon are the floors


def _rate_text(rate_bps: float) -> str:
    """A rate as a user writes it, for error messages."""
    return f"{rate_bps / 1e6:g} Mbit/s" if rate_bps >= 1e6 else f"{rate_bps / 1e3:g} kbit/s"


def _whole(name: str, value) -> int | None:
    """A byte setting: None (the default) or a whole number >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TestbedError(f"pfc {name} {value!r} is not a whole number of bytes", key=f"{name}_bytes")
    if value < 0:
        raise TestbedError(f"pfc {name} {value} B is negative: expected a size >= 0", key=f"{name}_bytes")
    return value


def min_headroom(rate_bps: float, mtu: int, reaction_ms: float) -> int:
    """Bytes one feeding link can still deliver after XOFF: 2 frames + the reaction time's worth."""
    return 2 * (mtu + ETH_HEADER) + math.ceil(rate_bps * reaction_ms / 1000 / 8)


def resolve(cfg: PfcConfig, rate_bps: float, mtu: int, buffer_bytes: int) -> ResolvedPfc:
    """Fill in the defaults and check every rule; one-line TestbedError naming the value and the rule.

    Values are checked even with ``enabled=False`` (a bad setting is bad either way). With
    ``dynamic_alpha`` the thresholds are the kernel's to compute: xoff/xon given as well are
    refused, and the resolved xoff/xon are the floors (2 frames, 1 frame)."""
    _check_link(rate_bps, mtu, buffer_bytes)
    xoff = _whole("xoff", cfg.xoff_bytes)
    xon = _whole("xon", cfg.xon_bytes)
    headroom = _whole("headroom", cfg.headroom_bytes)
    poll_us = _poll_us(cfg.poll_us)
    reaction_ms = _reaction_ms(cfg.reaction_ms)
    alpha = _dynamic_alpha(cfg.dynamic_alpha, xoff, xon)
    frame = mtu + ETH_HEADER
    need = min_headroom(rate_bps, mtu, reaction_ms)
    headroom = _headroom(headroom, need, frame, rate_bps, reaction_ms)
    if alpha is not None:
        xoff, xon = 2 * frame, frame  # floors of the kernel's dynamic thresholds
    xoff, xon = _thresholds(xoff, xon, frame, buffer_bytes)
    return ResolvedPfc(enabled=bool(cfg.enabled), xoff_bytes=xoff, xon_bytes=xon, headroom_bytes=headroom,
                       min_headroom_bytes=need, frame_bytes=frame, buffer_bytes=buffer_bytes,
                       rate_bps=float(rate_bps), mtu=mtu, poll_us=poll_us, reaction_ms=float(reaction_ms),
                       dynamic_alpha=alpha)


def _check_link(rate_bps: float, mtu: int, buffer_bytes: int) -> None:
    """The datapath values every PFC size is derived from must make sense first."""
    if not rate_bps > 0:
        raise TestbedError(f"link rate {rate_bps!r} bit/s must be > 0 for PFC")
    if isinstance(mtu, bool) or not isinstance(mtu, int) or mtu < 1:
        raise TestbedError(f"mtu {mtu!r} must be a whole number >= 1 for PFC")
    if isinstance(buffer_bytes, bool) or not isinstance(buffer_bytes, int) or buffer_bytes < 1:
        raise TestbedError(f"buffer {buffer_bytes!r} B must be a whole number >= 1 for PFC")


def _poll_us(poll_us) -> int:
    """The daemon's poll interval: whole microseconds within POLL_US_RANGE (None: the default)."""
    poll_us = DEFAULT_POLL_US if poll_us is None else poll_us
    if isinstance(poll_us, bool) or not isinstance(poll_us, int):
        raise TestbedError(f"pfc poll_us {poll_us!r} is not a whole number of microseconds", key="poll_us")
    if not POLL_US_RANGE[0] <= poll_us <= POLL_US_RANGE[1]:
        raise TestbedError(f"pfc poll_us {poll_us} is out of range: expected {POLL_US_RANGE[0]} .. "
                           f"{POLL_US_RANGE[1]} us", key="poll_us")
    return poll_us


def _reaction_ms(reaction_ms) -> float:
    """The daemon's assumed worst reaction time, which sizes the headroom (None: the default)."""
    reaction_ms = DEFAULT_REACTION_MS if reaction_ms is None else reaction_ms
    if isinstance(reaction_ms, bool) or not isinstance(reaction_ms, (int, float)) or not reaction_ms > 0:
        raise TestbedError(f"pfc reaction_ms {reaction_ms!r} must be > 0 (the helper's worst reaction time)")
    return reaction_ms


def _dynamic_alpha(alpha, xoff: int | None, xon: int | None) -> float | None:
    """Dynamic thresholds' alpha, in the range the kernel can hold; static xoff/xon given with it
    conflict, since the kernel then computes the thresholds."""
    if alpha is None:
        return None
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or \
            not MIN_DYNAMIC_ALPHA <= alpha <= MAX_DYNAMIC_ALPHA:
        raise TestbedError(f"pfc dynamic_alpha {alpha!r} is out of range: expected 1/{1 / MIN_DYNAMIC_ALPHA:g} "
                           f"({MIN_DYNAMIC_ALPHA:g}) <= alpha <= {MAX_DYNAMIC_ALPHA:g}", key="dynamic_alpha")
    given = [f"{name} {v} B" for name, v in (("xoff", xoff), ("xon", xon)) if v is not None]
    if given:
        raise TestbedError(f"pfc {given[0]} conflicts with dynamic_alpha {alpha:g}: the XOFF threshold is then "
                           "alpha x the switch's free buffer; leave xoff and xon unset", key="dynamic_alpha")
    return float(alpha)


def _headroom(headroom: int | None, need: int, frame: int, rate_bps: float, reaction_ms: float) -> int:
    """Headroom per feeding link: at least what is in flight (``need``); None: that, rounded up."""
    if headroom is None:
        return -(-need // HEADROOM_ROUND) * HEADROOM_ROUND
    if headroom < need:
        raise TestbedError(
            f"pfc headroom {headroom} B is below the {need} B in flight on one link (2 frames of {frame} B + "
            f"{need - 2 * frame} B at {_rate_text(rate_bps)} in {reaction_ms:g} ms)", key="headroom_bytes")
    return headroom


def _thresholds(xoff: int | None, xon: int | None, frame: int, buffer_bytes: int) -> tuple[int, int]:
    """XOFF and XON with their defaults: XOFF inside the buffer and at least two frames, XON below it."""
    if xoff is None:
        xoff = buffer_bytes // 2
    if xoff > buffer_bytes:
        raise TestbedError(f"pfc xoff {xoff} B is larger than the {buffer_bytes} B buffer", key="xoff_bytes")
    if xoff < 2 * frame:
        raise TestbedError(f"pfc xoff {xoff} B is below two frames of {frame} B ({2 * frame} B): "
                           "a queue must hold what is being sent plus one frame", key="xoff_bytes")
    if xon is None:
        xon = max(xoff - 2 * frame, frame)
    if xon >= xoff:
        raise TestbedError(f"pfc xon {xon} B must be below xoff {xoff} B", key="xon_bytes")
    return xoff, xon


def shared_buffer(resolved: ResolvedPfc, n_ports: int) -> int:
    """A switch's shared pool for dynamic thresholds: its ports' buffers together."""
    return n_ports * resolved.buffer_bytes


def dynamic_xoff_max(resolved: ResolvedPfc, shared: int) -> int:
    """The highest XOFF a queue can see: alone in its switch, alpha x (shared - b) = b
    at b = alpha x shared / (1 + alpha) (and never below the 2-frame floor)."""
    a = resolved.dynamic_alpha
    return max(resolved.xoff_bytes, math.floor(a * shared / (1 + a)))


def queue_limit(resolved: ResolvedPfc, n_feeders: int, xoff_max: int | None = None) -> int:
    """Byte limit of a switch egress queue (its bfifo/tbf limit).

    PFC on: ``xoff + n_feeders * headroom`` (with dynamic thresholds, the
    highest XOFF the queue can see, ``xoff_max``, stands for xoff). Up to XOFF the queue fills like
    any buffer; after XOFF each of its ``n_feeders`` feeding links may still
    deliver up to one headroom (frames in flight plus the daemon's reaction
    time), reserved per feeding link as a real switch reserves headroom per
    ingress port, so a correctly reacting PFC never drops. PFC off: the plain
    ``buffer_bytes``."""
    if n_feeders < 0:
        raise TestbedError(f"n_feeders {n_feeders} is negative")
    if not resolved.enabled:
        return resolved.buffer_bytes
    return (xoff_max or resolved.xoff_bytes) + n_feeders * resolved.headroom_bytes


# ------------------------------------------------------------------ feeders
_CACHE: dict[int, tuple[weakref.ref, object]] = {}


def _cached(fabric: Fabric, key: str, compute):
    """Per-fabric memo (fabrics are not hashable; entries die with the fabric).
    Assumes a fabric is not rewired after it is built, as every builder does."""
    slot = _CACHE.get(id(fabric))
    if slot is None or slot[0]() is not fabric:
        ref = weakref.ref(fabric, lambda _r, i=id(fabric): _CACHE.pop(i, None))
        slot = (ref, {})
        _CACHE[id(fabric)] = slot
    memo = slot[1]
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def tables_of(fabric: Fabric) -> ForwardingTables:
    """``forwarding_tables(fabric)``, computed once per fabric."""
    return _cached(fabric, "tables", lambda: forwarding_tables(fabric))


def host_destinations(fabric: Fabric, gpu: int, port: int) -> set[str]:
    """Addresses GPU ``gpu`` sends out of NIC ``port``: hosts route by destination plane
    (10.2/16 leaves on port 1, 10.1/16 on port 2), never to their own addresses."""
    return {addressing.ip_of(h, dp) for h in fabric.gpus() if h != gpu for dp in (1, 2)
            if egress_port_for(dp) == port}


def carried(fabric: Fabric) -> dict[tuple[str, int], frozenset[str]]:
    """(switch, OpenFlow port) -> destination addresses that routed host traffic puts on
    that egress queue: what the GPUs send (per host routing) propagated through the
    forwarding tables to a fixed point. Destinations that only a switch table could
    send somewhere but that no host traffic ever brings there are left out."""
    return _cached(fabric, "carried", lambda: _carried(fabric))


def _carried(fabric: Fabric, tables: ForwardingTables | None = None) -> dict[tuple[str, int], frozenset[str]]:
    tables = tables or tables_of(fabric)
    arriving: dict[str, set[str]] = {name: set() for name in fabric.switches}
    for (gpu, port), (switch, _) in fabric.attachment.items():
        arriving[switch] |= host_destinations(fabric, gpu, port)
    out: dict[tuple[str, int], set[str]] = {(name, p): set() for name, sw in fabric.switches.items() for p in sw.ports}
    work = {name: set(dests) for name, dests in arriving.items() if dests}
    while work:
        name, new = work.popitem()
        sw = fabric.switches[name]
        table = tables[name]
        for d in new:
            hop = table.get(d)
            if hop is None:
                continue
            for p in hop.ports:
                out[(name, p)].add(d)
                peer, _ = sw.ports[p]
                if peer in arriving and d not in arriving[peer]:
                    arriving[peer].add(d)
                    work.setdefault(peer, set()).add(d)
    return {k: frozenset(v) for k, v in out.items()}


def feeders(fabric: Fabric) -> dict[str, list[str]]:
    """Switch egress queue id ("sw3:9") -> sorted upstream queue ids that traffic can go from into it.

    For switch X's port p, each port i of X with peer (N, j) is a candidate:
    a switch N feeds X:p through its queue ``"N:j"`` if some destination d that
    routed host traffic puts on N:j (``carried``) is sent out of p by X's
    table; a GPU g on NIC port q feeds X:p through ``"gpu<g>:p<q>"`` if some d
    that g sends out of q (``host_destinations``) is sent out of p by X.
    Every switch queue is a key (an empty list when nothing can feed it).
    Computed once per fabric; the lists returned are fresh copies."""
    cached = _cached(fabric, "feeders", lambda: _feeders(fabric))
    return {q: list(f) for q, f in cached.items()}


def failover_feeders(fabric: Fabric) -> dict[str, list[str]]:
    """``feeders`` over every port a switch may forward on once its groups fail over (a ZCube cable's
    parallel siblings too): who the pause daemon must be able to pause, since a pause cannot wait for the
    controller. Queue limits keep the planned ``feeders``."""
    cached = _cached(fabric, "failover_feeders", lambda: _feeders(fabric, _failover_tables(fabric)))
    return {q: list(f) for q, f in cached.items()}


def failover_sources_via(fabric: Fabric) -> dict[str, dict[str, frozenset[str]]]:
    """``sources_via`` over the failover tables (``failover_feeders``)."""
    return _cached(fabric, "failover_sources_via", lambda: _sources_via(fabric, _failover_tables(fabric)))


def _failover_tables(fabric: Fabric) -> ForwardingTables:
    from fabrics.failover import failover_tables

    return _cached(fabric, "failover_tables", lambda: failover_tables(fabric, tables_of(fabric)))


def _feeders(fabric: Fabric, tables: ForwardingTables | None = None) -> dict[str, tuple[str, ...]]:
    tables = tables or tables_of(fabric)
    load = carried(fabric) if tables is tables_of(fabric) else _carried(fabric, tables)
    out: dict[str, tuple[str, ...]] = {}
    for name, sw in fabric.switches.items():
        by_port: dict[int, set[str]] = {p: set() for p in sw.ports}  # dests X sends out of p
        for d, hop in tables[name].items():
            for p in hop.ports:
                by_port[p].add(d)
        upstream = []
        for i, (peer, peer_port) in sorted(sw.ports.items()):
            if peer.startswith("gpu"):
                g = int(peer[3:])
                upstream.append((f"gpu{g}:p{peer_port}", host_destinations(fabric, g, peer_port)))
            else:
                upstream.append((f"{peer}:{peer_port}", load[(peer, peer_port)]))
        for p in sorted(sw.ports):
            out_dests = by_port[p]
            out[f"{name}:{p}"] = tuple(sorted((qid for qid, dests in upstream if not out_dests.isdisjoint(dests)),
                                              key=queue_sort_key))
    return out


def sources_via(fabric: Fabric) -> dict[str, dict[str, frozenset[str]]]:
    """Switch queue id -> {feeder queue id -> NIC queue ids whose traffic can
    enter the queue through that feeder}, from every host-routed path.

    What real PFC's ingress accounting needs: a switch pauses an ingress port
    only for bytes that came in on it. The daemon, seeing which NICs' packets
    sit in a congested queue (the kernel stamps each NIC's last arrival per
    queue), pauses only the feeders those NICs' traffic came through, not
    every link that could have carried some."""
    return _cached(fabric, "sources_via", lambda: _sources_via(fabric))


def _sources_via(fabric: Fabric, tables: ForwardingTables | None = None) -> dict[str, dict[str, frozenset[str]]]:
    from fabrics.routing import walk

    tables = tables or tables_of(fabric)
    out: dict[str, dict[str, set[str]]] = {f"{n}:{p}": {} for n, sw in fabric.switches.items() for p in sw.ports}
    by_ip = {addressing.ip_of(g, p): (g, p) for g in fabric.gpus() for p in (1, 2)}
    for (gpu, port) in fabric.attachment:
        nic = f"gpu{gpu}:p{port}"
        for d in host_destinations(fabric, gpu, port):
            for hops, outs in walk(fabric, tables, (gpu, port), by_ip[d]):
                chain = [nic] + [f"{sw}:{o}" for sw, o in zip(hops, outs)]
                for upstream, queue in zip(chain, chain[1:]):
                    out[queue].setdefault(upstream, set()).add(nic)
    return {q: {f: frozenset(n) for f, n in feeds.items()} for q, feeds in out.items()}


def queue_sort_key(qid: str) -> tuple:
    """Natural order of queue ids: gpu2:p1 < gpu10:p1, sw2:3 < sw10:1, leaf*/spine* by name."""
    node, _, port = qid.partition(":")
    head = node.rstrip("0123456789")
    num = node[len(head):]
    return (head, int(num) if num else 0, int(port.lstrip("p")) if port.lstrip("p").isdigit() else 0)


# --------------------------------------------------------------- thresholds
def thresholds(fabric: Fabric, resolved: ResolvedPfc) -> dict[str, dict]:
    """Switch queue id -> {"xoff", "xon", "limit", "feeders"} (bytes; limit from ``queue_limit``).
    With PFC off, xoff and xon are None and limit is the plain buffer. With dynamic
    thresholds xoff/xon are the floors and the entry adds ``"dynamic": {"alpha",
    "shared", "switch", "xoff_max"}`` (the pool is per switch)."""
    out = {}
    dynamic = resolved.enabled and resolved.dynamic_alpha is not None
    for qid, feed in feeders(fabric).items():
        on = resolved.enabled
        top = None
        if dynamic:
            switch = qid.partition(":")[0]
            shared = shared_buffer(resolved, len(fabric.switches[switch].ports))
            top = dynamic_xoff_max(resolved, shared)
        out[qid] = {"xoff": resolved.xoff_bytes if on else None, "xon": resolved.xon_bytes if on else None,
                    "limit": queue_limit(resolved, len(feed), top), "feeders": feed}
        if dynamic:
            out[qid]["dynamic"] = {"alpha": resolved.dynamic_alpha, "shared": shared, "switch": switch,
                                   "xoff_max": top}
    return out


def policy_doc(fabric: Fabric, resolved: ResolvedPfc, nic_limit_bytes: int | None = None) -> dict:
    """JSON-able policy for the pause daemon. Keys:

    * ``version`` (1), ``fabric`` (``Fabric.describe()``), ``kind``, ``n_gpus``;
    * ``config``: the resolved settings (``ResolvedPfc`` as a dict): ``enabled``,
      ``xoff_bytes``, ``xon_bytes``, ``headroom_bytes``, ``min_headroom_bytes``,
      ``frame_bytes``, ``buffer_bytes``, ``rate_bps``, ``mtu``, ``poll_us``,
      ``reaction_ms``;
    * ``queues``: queue id -> entry. Switch queues: ``{"kind": "switch",
      "xoff", "xon", "limit", "feeders"}`` as ``thresholds`` gives them. Every
      feeder that is a NIC queue has an entry too: ``{"kind": "nic", "xoff":
      None, "xon": None, "limit": nic_limit_bytes, "feeders": []}`` (NIC queues
      are paused, never watched; their limit is the datapath's, which the
      caller passes or fills in);
    * ``paused_by``: transmitter queue id -> sorted switch queue ids whose XOFF
      pauses it (the inverse of ``feeders``; a transmitter resumes when none of
      them holds it).

    The caller adds what only the running datapath knows (``dev``, ``peer``,
    ``netns`` per queue, ``burst_bytes``, ``log``, ``status``)."""
    th = thresholds(fabric, resolved)
    queues: dict[str, dict] = {}
    paused_by: dict[str, list[str]] = {}
    for qid, t in th.items():
        queues[qid] = {"kind": "switch", **t}
        for f in t["feeders"]:
            paused_by.setdefault(f, []).append(qid)
    for f in paused_by:
        if f not in queues:
            queues[f] = {"kind": "nic", "xoff": None, "xon": None, "limit": nic_limit_bytes, "feeders": []}
    doc = {"version": 1, "fabric": fabric.describe(), "kind": fabric.kind, "n_gpus": fabric.n_gpus,
           "config": asdict(resolved)}
    doc["queues"] = {q: queues[q] for q in sorted(queues, key=queue_sort_key)}
    doc["paused_by"] = {f: sorted(v, key=queue_sort_key) for f, v in sorted(paused_by.items(),
                                                                          key=lambda kv: queue_sort_key(kv[0]))}
    return doc


# ------------------------------------------------------------- on the emulated datapath
def with_burst_headroom(cfg: PfcConfig, rate_bps: float, mtu: int, burst_bytes: int) -> PfcConfig:
    """Default headroom for the emulated links: besides the frames in flight and the daemon's reaction, a
    resumed tbf sends its whole bucket (``burst``) at once, so a link can deliver that much more after XOFF.
    A user-given headroom is kept (and checked against the in-flight minimum by ``resolve``)."""
    from dataclasses import replace

    if cfg.headroom_bytes is not None:
        return cfg
    need = min_headroom(rate_bps, mtu, cfg.reaction_ms or DEFAULT_REACTION_MS) + burst_bytes
    return replace(cfg, headroom_bytes=-(-need // HEADROOM_ROUND) * HEADROOM_ROUND)


def resolve_on(cfg: PfcConfig, datapath) -> ResolvedPfc:
    """``cfg`` resolved on the emulated links of ``datapath`` (a ``fabrics.datapath.DatapathConfig``), burst
    headroom included: what the pause daemon and the queue limits use; a bad setting fails here."""
    cfg = with_burst_headroom(cfg, datapath.rate_bps, datapath.mtu, datapath.burst_bytes)
    return resolve(cfg, datapath.rate_bps, datapath.mtu, datapath.buffer_bytes)


def queue_limits(fabric: Fabric, datapath, cfg: PfcConfig | None) -> dict[str, int]:
    """Each switch egress queue's byte limit with PFC on (``{}`` with PFC off): XOFF plus a headroom per
    feeding link (``queue_limit``)."""
    if cfg is None or not cfg.enabled:
        return {}
    return {q: th["limit"] for q, th in thresholds(fabric, resolve_on(cfg, datapath)).items()}


def daemon_policy(fabric: Fabric, datapath, cfg: PfcConfig, state_dir: str) -> dict:
    """The pause daemon's policy document: thresholds and feeders, with the devices, namespaces and NIC
    addresses only the datapath plan knows (``datapath``: a ``fabrics.datapath.DatapathConfig``)."""
    import os

    from fabrics.datapath import plan_datapath
    from pfc import files

    plan = plan_datapath(fabric, datapath)
    dp = plan.config  # validated: the NIC buffer's default filled in
    resolved = resolve_on(cfg, dp)
    th = thresholds(fabric, resolved)
    sources = failover_sources_via(fabric)  # a failed-over group sends from other feeders
    reach = failover_feeders(fabric)
    queues = {}
    for q in plan.queues:
        entry = {"kind": q.kind, "dev": q.dev, "netns": q.netns, "peer": q.peer,
                 "limit": dp.nic_buffer_bytes if q.kind == "nic" else dp.buffer_bytes}
        if q.qid in th:
            entry.update(xoff=th[q.qid]["xoff"], xon=th[q.qid]["xon"], limit=th[q.qid]["limit"],
                         feeders=reach[q.qid],
                         sources={f: sorted(nics) for f, nics in sources[q.qid].items()})
            if "dynamic" in th[q.qid]:
                entry["dynamic"] = th[q.qid]["dynamic"]
        queues[q.qid] = entry
    nics = {f"gpu{g}:p{p}": addressing.ip_of(g, p) for g, p in sorted(fabric.attachment)}
    return {"rate_bps": dp.rate_bps, "nics": nics, "burst_bytes": dp.burst_bytes, "mtu": dp.mtu,
            "poll_us": resolved.poll_us,
            "log": os.path.join(state_dir, files.LOG_FILE), "status": os.path.join(state_dir, files.STATUS_FILE),
            "resolved": policy_doc(fabric, resolved).get("config"), "queues": queues}

