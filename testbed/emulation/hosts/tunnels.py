"""Cross-host cables: one kernel tunnel per cable, and each host's part of the datapath plan.

A local cable is two veth hops: the transmitting end's queue (tbf + bfifo on ``<sw>-eth<n>``, or
on the NIC ``gpu<i>-p<p>`` in its namespace) leaves through the veth peer (``<sw>-eth<n>r`` /
``gpu<i>-p<p>u``, where PFC counts departures), which is a port of the receiving switch's bridge
``<peer>-rx`` (or redirects, tc mirred, into the GPU's veth). A cross-host cable keeps all of that
on the transmitting host and puts one tunnel device between the veth peer and the receiver:

    host A: queue -> veth peer --(tc mirred, ingress -> egress)--> tbt<key>  ==underlay==>
    host B: tbt<key> --(bridge port of <peer>-rx | tc mirred -> gpu<i>-p<p>u)--> receiver

and the same in the other direction through the same device pair (a tunnel device is full duplex).
So the queue, its rate, burst and buffer are the local cable's, on the host of the transmitter;
the tunnel only carries what already left the queue. ``key`` is the cable's number in the
fabric's cable list (from 1): the same on both hosts, one key per cable.

VXLAN by default, gretap on request. The anchor (Mininet Cluster Edition's RemoteGRELink) uses
gretap, but GRE needs CONFIG_NET_IPGRE, which the kernel of the machines this project runs on
does not have (``ip link add ... type gretap``: "Unknown device type"; VXLAN is built in), and
some clouds filter IP protocol 47 while VXLAN is plain UDP. Both are point-to-point here: one
device per cable with the far host as its only remote, the cable's key as GRE key / VNI, no FDB
learning. The underlay MTU must carry the emulated MTU plus the encapsulation (``OVERHEAD``);
``check_underlay_mtu`` refuses a host whose underlay is too small with one line, since DF is set
on the outer packets (no silent fragmentation: it would change the timing) and an oversize frame
would simply vanish.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from common.errors import TestbedError
from fabrics import addressing
from fabrics.datapath import DatapathPlan
from fabrics.topology import Cable
from testbed.emulation.hosts.assign import HostAssignment

# outer IPv4 (20) + encapsulation + the inner Ethernet header (14)
OVERHEAD = {"gretap": 20 + 4 + 4 + 14, "vxlan": 20 + 8 + 8 + 14}  # GRE with key: 8; UDP 8 + VXLAN 8
KINDS = tuple(OVERHEAD)
VXLAN_PORT = 4789
DEV_PREFIX = "tbt"


@dataclass(frozen=True)
class Tunnel:
    """One host's end of one cross-host cable."""

    key: int
    dev: str  # the tunnel device here, tbt<key>
    local_end: tuple[str, int]  # (switch or gpu<i>, port) on this host
    remote_end: tuple[str, int]
    remote_host: str
    tx_from: str  # the veth peer whose ingress is redirected into the tunnel
    rx_bridge: str | None  # the tunnel is a port of this bridge (the local end is a switch) ...
    rx_mirred: str | None  # ... or its ingress redirects into this device (the local end is a NIC)


@dataclass
class HostPart:
    host: str
    plan: DatapathPlan  # what this host builds with the one-host code
    tunnels: list[Tunnel] = field(default_factory=list)


def cable_key(fabric, cable: Cable) -> int:
    return fabric.cables.index(cable) + 1


def _peer_dev(node: str, port: int) -> str:
    """The veth peer where a cable end's transmissions leave its queue."""
    if node.startswith("gpu"):
        return f"{addressing.host_intf(int(node[3:]), port)}u"
    return f"{addressing.switch_intf(node, port)}r"


def tunnels_of(placement: HostAssignment, host: str) -> list[Tunnel]:
    """The tunnel ends ``host`` makes, in cable order."""
    out = []
    for cable in placement.cross:
        ends = [(cable.a, cable.a_port), (cable.b, cable.b_port)]
        mine = [e for e in ends if placement.host_of(e[0]) == host]
        if not mine:
            continue
        local, remote = mine[0], next(e for e in ends if e is not mine[0])
        key = cable_key(placement.fabric, cable)
        is_nic = local[0].startswith("gpu")
        out.append(Tunnel(key=key, dev=f"{DEV_PREFIX}{key}", local_end=local, remote_end=remote,
                          remote_host=placement.host_of(remote[0]), tx_from=_peer_dev(*local),
                          rx_bridge=None if is_nic else f"{local[0]}-rx",
                          rx_mirred=_peer_dev(*local) if is_nic else None))
    return out


def split(plan: DatapathPlan, placement: HostAssignment, host: str) -> HostPart:
    """``host``'s part of the whole fabric's datapath plan: its switches, GPUs, queues, the local
    cables as planned, and a tunnel for each cable that leaves it."""
    switches = set(placement.switches_on(host))
    gpus = set(placement.gpus_on(host))
    tunnels = tunnels_of(placement, host)

    def dev_here(dev: str) -> bool:
        """Whether a root-namespace device of the one-host plan belongs on ``host``."""
        if dev.startswith("gpu"):
            return int(dev[3:].split("-")[0]) in gpus
        return dev.rsplit("-", 1)[0] in switches

    part = copy.copy(plan)
    part.ovs_ports = {sw: ports for sw, ports in plan.ovs_ports.items() if sw in switches}
    part.veths = [v for v in plan.veths if dev_here(v[0])]
    part.mirreds = [(a, b) for a, b in plan.mirreds if dev_here(a) and dev_here(b)]
    part.mirreds += [(t.tx_from, t.dev) for t in tunnels]
    part.mirreds += [(t.dev, t.rx_mirred) for t in tunnels if t.rx_mirred]
    into = {}
    for t in tunnels:
        if t.rx_bridge:
            into.setdefault(t.rx_bridge, []).append(t.dev)
    part.bridges = {}
    for br, slaves in plan.bridges.items():
        if br[:-3] not in switches:
            continue
        kept = [s for s in slaves[:-1] if dev_here(s)]
        part.bridges[br] = kept + into.get(br, []) + slaves[-1:]  # the feed towards the switch stays last
    part.queues = [q for q in plan.queues if (q.netns and int(q.qid[3:].split(":")[0]) in gpus)
                   or (not q.netns and q.qid.split(":")[0] in switches)]
    part.hosts = [h for h in plan.hosts if h.gpu in gpus]
    return HostPart(host, part, tunnels)


def overhead(kind: str) -> int:
    if kind not in OVERHEAD:
        raise TestbedError(f"tunnel kind {kind!r}: expected one of {', '.join(KINDS)}")
    return OVERHEAD[kind]


DEFAULT_KIND = "vxlan"


def check_underlay_mtu(host: str, underlay_mtu: int, emulated_mtu: int, kind: str = DEFAULT_KIND,
                       device: str = "") -> None:
    """Refuse, in one line naming the host and the MTU needed, an underlay that cannot carry an
    emulated frame in a tunnel."""
    need = emulated_mtu + overhead(kind)
    if underlay_mtu < need:
        on = f" ({device})" if device else ""
        raise TestbedError(f"host {host}: underlay MTU {underlay_mtu}{on} is too small for cross-host cables: "
                           f"needs {need} (emulated MTU {emulated_mtu} + {overhead(kind)} B of {kind})")


def link_lines(tunnels: list[Tunnel], local_addr: str, remote_addr: dict[str, str], mtu: int,
               kind: str = DEFAULT_KIND, alias: str = "", group: int | None = None) -> list[str]:
    """``ip -batch`` lines that make, mark and raise this host's tunnel devices."""
    overhead(kind)
    lines = []
    for t in tunnels:
        remote = remote_addr[t.remote_host]
        if kind == "gretap":
            lines.append(f"link add {t.dev} type gretap local {local_addr} remote {remote} key {t.key} ttl 64 "
                         "pmtudisc")
        else:
            lines.append(f"link add {t.dev} type vxlan id {t.key} local {local_addr} remote {remote} "
                         f"dstport {VXLAN_PORT} ttl 64 df set nolearning noudpcsum")
        extra = (f" alias {alias}" if alias else "") + (f" group {group}" if group is not None else "")
        lines.append(f"link set dev {t.dev} mtu {mtu}{extra}")
    for t in tunnels:
        lines.append(f"link set dev {t.dev} up")
    return lines


def underlay_of(route_get: list[dict], links: list[dict]) -> tuple[str, int]:
    """(device, MTU) of the route towards a peer, from ``ip -j route get`` and ``ip -j link`` output."""
    if not route_get:
        raise TestbedError("no route to the peer")
    r = route_get[0]
    dev = r.get("dev", "")
    mtu = next((ln.get("mtu") for ln in links if ln.get("ifname") == dev), None)
    route_mtu = (r.get("metrics") or [{}])[0].get("mtu") if isinstance(r.get("metrics"), list) else None
    return dev, int(route_mtu or mtu or 0)


def _qid_of(end: tuple[str, int]) -> str:
    node, port = end
    return f"{node}:p{port}" if node.startswith("gpu") else f"{node}:{port}"


def pfc_policy_for(policy: dict, part: HostPart, state_dir: str | None = None) -> dict:
    """One host's pause-daemon policy from the whole fabric's (``pfc.policy.daemon_policy``):
    its own queues; for each feeder of its watched queues that is on another host, the tunnel here
    its PFC frames go into (``remote_feeders``); for each tunnel here, the transmitter a frame arriving
    on it pauses (``pause_rx``). Log and status files go to ``state_dir`` (default: as given)."""
    import os

    mine = {q.qid for q in part.plan.queues}
    by_remote_end = {_qid_of(t.remote_end): t.dev for t in part.tunnels}
    remote = {}
    for qid in sorted(mine):
        for f in policy["queues"][qid].get("feeders", []):
            if f not in mine:
                if f not in by_remote_end:
                    raise TestbedError(f"host {part.host}: feeder {f} of {qid} is neither here nor behind a tunnel")
                remote[f] = by_remote_end[f]
    out = dict(policy)
    out["queues"] = {q: e for q, e in policy["queues"].items() if q in mine}
    out["remote_feeders"] = remote
    out["pause_rx"] = {t.dev: _qid_of(t.local_end) for t in part.tunnels}
    if state_dir:
        out["log"] = os.path.join(state_dir, os.path.basename(policy["log"]))
        out["status"] = os.path.join(state_dir, os.path.basename(policy["status"]))
    return out
