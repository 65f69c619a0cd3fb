"""What the emulated datapath is made of, computed from the fabric model alone.

Design (measured, see README "Datapath"): OVS userspace switches whose ports
only transmit or only receive.

* Transmit: every switch port of the model is an OVS ``system`` port (the
  model's OpenFlow port number) on one end of a veth pair. OVS sends on it
  through AF_PACKET, which passes the device qdisc, so the switch's egress
  queue lives there: tbf (rate R, burst) with a byte-limited bfifo leaf.
  OVS is kept off that qdisc with a ``linux-noop`` QoS row.
* Receive: all receive ends of a switch are ports of one Linux bridge
  (learning and flooding off, except towards the switch) feeding the switch's
  single ``afxdp`` port. One PMD thread polls every switch; the slow main
  thread polls nothing busy. (in_port is the same for all packets; routing is
  by destination only, so nothing needs it.)
* Switch to GPU: the transmit veth's far end redirects (tc mirred) into the
  GPU link, whose other end is the GPU's NIC port in its namespace.
* GPU NIC queue: tbf + bfifo on the NIC port inside the namespace.

Names (all at most 15 characters; every device carries the ifalias
``zcube-testbed`` so ``clean`` finds exactly what we made, and joins link
group ``LINK_GROUP`` so teardown deletes them in one kernel batch):
  netns ``tb-gpu<i>``; NIC ``gpu<i>-p<p>`` (in the netns) with root-side end
  ``gpu<i>-p<p>u``; switch transmit port ``<sw>-eth<n>`` with far end
  ``<sw>-eth<n>r``; receive bridge ``<sw>-rx`` and its veth ``<sw>-rxa`` /
  ``<sw>-rxp`` (the afxdp port).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from common import scale
from common.errors import TestbedError
from fabrics import Fabric, addressing
from fabrics.failover import far_end
from fabrics.routing import egress_port_for

ALIAS = "zcube-testbed"
LINK_GROUP = 31331  # devices we make join this link group: one "ip link del group" removes them
RX_OFPORT = 1000
NETNS_PREFIX = "tb-"
MAX_AFXDP_MTU = 3500  # AF_XDP frames in OVS are 4 KB


@dataclass(frozen=True)
class DatapathConfig:
    rate_bps: float = scale.DEFAULT_RATE_BPS
    mtu: int = scale.DEFAULT_MTU
    buffer_bytes: int = scale.DEFAULT_BUFFER_BYTES  # switch egress queues
    nic_buffer_bytes: int = 0  # host NIC queues; 0: DEFAULT_NIC_QUEUE_PACKETS frames
    burst_bytes: int = scale.DEFAULT_BURST_BYTES
    tcp_limit_output_bytes: int = 0  # 0: two frames (TSQ; keeps hosts from flooding their own NIC queue)

    @classmethod
    def from_dict(cls, d: dict) -> "DatapathConfig":
        """From its dict (a fabric's state, the controller's config, a host's spec: ``dataclasses.asdict``),
        checked; an unknown key is refused in one line."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise TestbedError(f"datapath setting {unknown[0]!r} is unknown: expected one of "
                               f"{', '.join(sorted(known))}")
        return cls(**d).validate()

    def validate(self) -> "DatapathConfig":
        if not 1e4 <= self.rate_bps <= 1e9:
            raise TestbedError(f"rate {self.rate_bps:g} bit/s is out of range: expected 10kbit .. 1gbit",
                               key="rate_bps")
        if not 576 <= self.mtu <= MAX_AFXDP_MTU:
            raise TestbedError(f"mtu {self.mtu} is out of range: expected 576 .. {MAX_AFXDP_MTU} "
                               "(AF_XDP frames in OVS are 4 KB)", key="mtu")
        if self.burst_bytes < self.mtu + 14:
            raise TestbedError(f"burst {self.burst_bytes} B is smaller than one frame ({self.mtu + 14} B)",
                               key="burst_bytes")
        if self.buffer_bytes < 2 * (self.mtu + 14):
            raise TestbedError(f"buffer {self.buffer_bytes} B holds fewer than two frames of "
                               f"{self.mtu + 14} B: expected at least {2 * (self.mtu + 14)}", key="buffer_bytes")
        if not self.nic_buffer_bytes:
            object.__setattr__(self, "nic_buffer_bytes", scale.DEFAULT_NIC_QUEUE_PACKETS * (self.mtu + 14))
        if self.nic_buffer_bytes < 2 * (self.mtu + 14):
            raise TestbedError(f"NIC buffer {self.nic_buffer_bytes} B holds fewer than two frames of "
                               f"{self.mtu + 14} B: expected at least {2 * (self.mtu + 14)}", key="nic_buffer_bytes")
        if not self.tcp_limit_output_bytes:
            object.__setattr__(self, "tcp_limit_output_bytes", 2 * (self.mtu + 50))
        return self


@dataclass(frozen=True)
class Queue:
    """An observable egress queue: the bfifo under tbf on ``dev`` (in ``netns``)."""

    qid: str  # "sw1:9" (switch:port) or "gpu3:p1" (NIC port)
    kind: str  # "switch" or "nic"
    dev: str
    netns: str | None
    towards: str  # what the queue feeds: "sw2", "gpu3:p1", ...
    peer: str = ""  # root-namespace device where its departures arrive (the veth peer): PFC counts them there


@dataclass
class HostPlan:
    gpu: int
    netns: str
    nics: dict[int, str]  # port -> interface name in the netns
    addresses: dict[int, str]
    neighbours: list[tuple[str, str, int]]  # (ip, mac, via port)


@dataclass
class DatapathPlan:
    fabric: Fabric
    config: DatapathConfig
    veths: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)  # a, b, b_netns, b_mac
    bridges: dict[str, list[str]] = field(default_factory=dict)  # bridge -> slaves (last one feeds OVS)
    ovs_ports: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)  # sw -> (dev, type, ofport)
    mirreds: list[tuple[str, str]] = field(default_factory=list)  # ingress of a -> egress of b
    queues: list[Queue] = field(default_factory=list)
    hosts: list[HostPlan] = field(default_factory=list)

    @property
    def netns_names(self) -> list[str]:
        return [h.netns for h in self.hosts]

    @property
    def root_devices(self) -> list[str]:
        devs = [a for a, _, _, _ in self.veths] + [b for _, b, ns, _ in self.veths if ns is None]
        return devs + list(self.bridges)


def netns_of(gpu: int) -> str:
    return f"{NETNS_PREFIX}gpu{gpu}"


def plan_datapath(fabric: Fabric, config: DatapathConfig | None = None) -> DatapathPlan:
    cfg = (config or DatapathConfig()).validate()
    plan = DatapathPlan(fabric, cfg)
    for name in fabric.switches:
        plan.ovs_ports[name] = [(f"{name}-rxp", "afxdp", RX_OFPORT)]
        plan.bridges[f"{name}-rx"] = []
        plan.veths.append((f"{name}-rxa", f"{name}-rxp", None, None))

    for gpu in fabric.gpus():
        ns = netns_of(gpu)
        host = HostPlan(gpu, ns, {}, {}, [])
        for port in (1, 2):
            nic = addressing.host_intf(gpu, port)
            up = f"{nic}u"
            switch, of_port = fabric.attachment[(gpu, port)]
            plan.veths.append((up, nic, ns, addressing.mac_of(gpu, port)))
            plan.bridges[f"{switch}-rx"].append(up)  # GPU -> switch
            host.nics[port] = nic
            host.addresses[port] = addressing.ip_of(gpu, port)
            plan.queues.append(Queue(f"gpu{gpu}:p{port}", "nic", nic, ns, switch, up))
        for other in fabric.gpus():
            if other != gpu:
                for dst_port in (1, 2):
                    host.neighbours.append((addressing.ip_of(other, dst_port), addressing.mac_of(other, dst_port),
                                            egress_port_for(dst_port)))
        plan.hosts.append(host)

    for name, sw in fabric.switches.items():
        for of_port, (peer, peer_port) in sorted(sw.ports.items()):
            tx = addressing.switch_intf(name, of_port)
            far = f"{tx}r"
            plan.veths.append((tx, far, None, None))
            plan.ovs_ports[name].append((tx, "system", of_port))
            if peer.startswith("gpu"):
                gpu = int(peer[3:])
                plan.mirreds.append((far, f"{addressing.host_intf(gpu, peer_port)}u"))
                plan.queues.append(Queue(f"{name}:{of_port}", "switch", tx, None, f"gpu{gpu}:p{peer_port}", far))
            else:
                plan.bridges[f"{peer}-rx"].append(far)
                plan.queues.append(Queue(f"{name}:{of_port}", "switch", tx, None, peer, far))
    for name in fabric.switches:
        plan.bridges[f"{name}-rx"].append(f"{name}-rxa")
    for dev in plan.root_devices:
        if len(dev) > 15:
            raise TestbedError(f"interface name {dev!r} is longer than 15 characters: fabric too large to emulate",
                               key="interface")
    return plan


def shaper_lines(dev: str, cfg: DatapathConfig, buffer_bytes: int | None = None) -> list[str]:
    """tc batch lines: tbf at the link rate with a bfifo leaf (the queue) of
    ``buffer_bytes`` (default: the switch buffer).

    tbf rather than htb: a single-queue shaper needs no class tree, and a
    ``tc qdisc change`` of tbf refills its bucket, so PFC can pause a queue
    by dropping its rate and resume it cleanly (htb keeps the token deficit
    a near-zero rate ran up and stalls long after resume)."""
    limit = buffer_bytes or cfg.buffer_bytes
    return [
        f"qdisc replace dev {dev} root handle 1: tbf rate {cfg.rate_bps / 1e3:g}kbit burst {cfg.burst_bytes} "
        f"limit {limit}",
        f"qdisc replace dev {dev} parent 1:1 handle 10: bfifo limit {limit}",
    ]


def cut_devices(fabric: Fabric, ends: list[tuple[str, int]]) -> list[str]:
    """The root-namespace devices whose admin state cuts the cables at ``ends`` (either end of each) at both
    ends, as a real cable cut does: a switch port ``<sw>-eth<n>`` loses carrier when its far end
    ``<sw>-eth<n>r`` goes down, a NIC ``gpu<i>-p<p>`` when its root-side end ``gpu<i>-p<p>u`` does. A port
    without carrier has its queue flushed by the kernel, so nothing lingers and keeps sending."""
    devs: list[str] = []
    for end in ends:
        for node, port in (end, far_end(fabric, end)):
            dev = (f"{addressing.host_intf(int(node[3:]), port)}u" if node.startswith("gpu")
                   else f"{addressing.switch_intf(node, port)}r")
            if dev not in devs:
                devs.append(dev)
    return devs

