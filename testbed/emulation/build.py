"""Build and remove a planned datapath with netlink (pyroute2), one ovsdb
transaction and one ``tc -batch`` per namespace, not a process per step.

Everything made is recorded as it is made (``Created``), so a failure or
Ctrl-C half way removes exactly what exists and nothing else.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import socket
import struct
import subprocess
import time

from pyroute2 import IPRoute

from common.errors import EnvironmentProblem
from fabrics.datapath import ALIAS, LINK_GROUP, DatapathPlan, shaper_lines
from testbed.emulation import netns
from testbed.emulation.state import Created

SIOCETHTOOL = 0x8946
# ETHTOOL_S{RXCSUM,TXCSUM,SG,TSO,GSO,GRO}
_OFFLOAD_CMDS = (0x15, 0x17, 0x19, 0x1F, 0x24, 0x2C)
OVS_SNDBUF_BYTES = 16 * 1024 * 1024


def run(cmd: list[str], stdin: str | None = None, timeout: float = 120) -> str:
    """Run a command; a failure is one line naming the command and its last error line."""
    proc = subprocess.run(cmd, input=stdin, text=True, capture_output=True, timeout=timeout)
    if proc.returncode:
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit status {proc.returncode}"
        raise EnvironmentProblem(f"{' '.join(cmd[:3])} failed: {last}")
    return proc.stdout


def offloads_off(names: list[str]) -> None:
    """Checksum/segmentation offloads off: OVS userspace cannot take GSO frames."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for name in names:
            for cmd in _OFFLOAD_CMDS:
                value = array.array("I", [cmd, 0])
                ifr = struct.pack("16sP", name.encode(), value.buffer_info()[0])
                try:
                    fcntl.ioctl(sock, SIOCETHTOOL, ifr)
                except OSError:
                    pass
    finally:
        sock.close()


def _write(path: str, value) -> None:
    """Set a sysctl; one a kernel does not have is skipped (the fabric works without it)."""
    try:
        with open(path, "w") as fh:
            fh.write(str(value))
    except OSError:
        pass


def build(plan: DatapathPlan, controller_port: int, created: Created, timings: dict,
          limits: dict[str, int] | None = None, bpf_obj=None, controller_host: str = "127.0.0.1") -> None:
    """Build ``plan``. ``limits`` overrides the byte limit of some switch queues
    (PFC: xoff + headroom per feeding link); ``bpf_obj`` (PFC on) is the
    compiled queue-watch object to attach to every queue."""
    with _timed(timings, "netns_s"):
        _add_namespaces(plan, created)
    with _timed(timings, "links_s"):
        _add_links(plan, created)
    with _timed(timings, "hosts_s"):
        for host in plan.hosts:
            _configure_host(plan, host)
    with _timed(timings, "ovs_s"):
        _build_ovs(plan, controller_port, created, controller_host)
    with _timed(timings, "queues_s"):
        _add_queues(plan, limits or {}, bpf_obj)


@contextlib.contextmanager
def _timed(timings: dict, key: str):
    """Record how long a phase took (seconds, ms resolution): ``up`` reports each phase."""
    t = time.monotonic()
    yield
    timings[key] = round(time.monotonic() - t, 3)


def _add_namespaces(plan: DatapathPlan, created: Created) -> None:
    """Every namespace in one ``ip -batch``; refuses names that exist, which are not ours to reuse."""
    os.makedirs(netns.NETNS_DIR, exist_ok=True)
    for name in plan.netns_names:
        if netns.exists(name):
            raise EnvironmentProblem(f"network namespace {name} already exists: run 'testbed clean'")
    run(["ip", "-batch", "-"], "".join(f"netns add {n}\n" for n in plan.netns_names))
    created.netns.extend(plan.netns_names)


def _add_links(plan: DatapathPlan, created: Created) -> None:
    """The root namespace's veths and receive bridges, wired, marked as ours and up."""
    ipr = IPRoute()
    try:
        _add_veths(ipr, plan, created)
        for br in plan.bridges:
            # no multicast snooping: a snooping bridge sends router-discovery (224.0.0.106) into the switch
            ipr.link("add", ifname=br, kind="bridge", br_stp_state=0, br_forward_delay=0, br_ageing_time=0,
                     br_mcast_snooping=0, group=LINK_GROUP)
            created.links.append(br)
        run(["ip", "-batch", "-"], "\n".join(_bridge_port_lines(plan)) + "\n")
        offloads_off([d for d in plan.root_devices if d not in plan.bridges])
        for dev in plan.root_devices:
            _write(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6", 1)
            # IGMPv2: no membership reports when it comes up (sent into a switch port, they are table misses)
            _write(f"/proc/sys/net/ipv4/conf/{dev}/force_igmp_version", 2)
            ipr.link("set", index=ipr.link_lookup(ifname=dev)[0], state="up")
    finally:
        ipr.close()


def _add_veths(ipr: IPRoute, plan: DatapathPlan, created: Created) -> None:
    """Every veth pair, its far end straight into its namespace; each recorded as soon as it exists, and
    marked ours (our link group) by the message that makes it: an ``up`` killed before the alias is set
    still leaves only devices ``clean`` recognises."""
    mtu = plan.config.mtu
    for a, b, b_ns, b_mac in plan.veths:
        if ipr.link_lookup(ifname=a):
            raise EnvironmentProblem(f"interface {a} already exists: run 'testbed clean'")
        peer = {"ifname": b, "mtu": mtu}
        if b_ns:
            peer["net_ns_fd"] = b_ns
        else:
            peer["group"] = LINK_GROUP
        if b_mac:
            peer["address"] = b_mac
        ipr.link("add", ifname=a, kind="veth", mtu=mtu, peer=peer, group=LINK_GROUP)
        created.links.append(a)


def _bridge_port_lines(plan: DatapathPlan) -> list[str]:
    """``ip -batch`` lines: receive ends into their bridge, which floods only towards the switch
    (its last port); every root device gets our alias and link group, by which clean-up finds it."""
    lines = []
    for br, slaves in plan.bridges.items():
        feed = slaves[-1]
        for dev in slaves:
            lines.append(f"link set dev {dev} master {br}")
        for dev in slaves[:-1]:
            lines.append(f"link set dev {dev} type bridge_slave learning off flood off "
                         "mcast_flood off bcast_flood off")
        lines.append(f"link set dev {feed} type bridge_slave learning off flood on")
    for dev in plan.root_devices:
        lines.append(f"link set dev {dev} alias {ALIAS} group {LINK_GROUP}")
    return lines


def _add_queues(plan: DatapathPlan, limits: dict[str, int], bpf_obj) -> None:
    """Every queue's shaper, one ``tc -batch`` per namespace, all running at once."""
    procs = [_tc_batch(None, _root_tc_lines(plan, limits, bpf_obj))]
    by_ns: dict[str, list[str]] = {}
    for q in plan.queues:
        if q.netns:
            by_ns.setdefault(q.netns, []).extend(shaper_lines(q.dev, plan.config, plan.config.nic_buffer_bytes))
    procs += [_tc_batch(ns, lines) for ns, lines in by_ns.items()]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        if proc.returncode:
            raise EnvironmentProblem(f"tc batch failed: {err.strip().splitlines()[-1:]}")


def _root_tc_lines(plan: DatapathPlan, limits: dict[str, int], bpf_obj) -> list[str]:
    """The root namespace's tc lines: switch queues, the redirects towards the GPUs and, with
    PFC, the queue-watch counters."""
    lines = []
    for q in plan.queues:
        if q.netns is None:
            lines += shaper_lines(q.dev, plan.config, limits.get(q.qid))
    for far, target in plan.mirreds:
        lines += [f"qdisc replace dev {far} clsact",
                  f"filter add dev {far} ingress protocol all prio 2 u32 match u32 0 0 "
                  f"action mirred egress redirect dev {target}"]
    if bpf_obj is not None:
        from pfc import queue_watch

        lines += queue_watch.tc_lines(plan.queues, bpf_obj, {far for far, _ in plan.mirreds})
    return lines


def _tc_batch(ns: str | None, lines: list[str]) -> subprocess.Popen:
    """Start one ``tc -batch`` (in namespace ``ns``) without waiting, so namespaces build in parallel."""
    cmd = ["tc", "-force", "-batch", "-"] if ns is None else ["tc", "-force", "-n", ns, "-batch", "-"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write("\n".join(lines) + "\n")
    proc.stdin.close()
    proc.stdin = None
    return proc


def _configure_host(plan: DatapathPlan, host) -> None:
    """A GPU's namespace: sysctls, NICs up with their addresses, routes per plane, static neighbours."""
    cfg = plan.config
    with netns.inside(host.netns):
        # IGMPv2: no membership reports when the NICs come up (IGMPv3 sends them to
        # 224.0.0.22, which the switches count as table misses)
        for key, value in (("ipv6/conf/all/disable_ipv6", 1), ("ipv6/conf/default/disable_ipv6", 1),
                           ("ipv4/conf/all/force_igmp_version", 2), ("ipv4/conf/default/force_igmp_version", 2),
                           ("ipv4/tcp_limit_output_bytes", cfg.tcp_limit_output_bytes)):
            _write(f"/proc/sys/net/{key}", value)
        offloads_off(list(host.nics.values()))
        ipr = IPRoute()
        try:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            idx = {p: ipr.link_lookup(ifname=n)[0] for p, n in host.nics.items()}
            for port, index in idx.items():
                ipr.link("set", index=index, state="up")
                ipr.addr("add", index=index, address=host.addresses[port], prefixlen=16)
            # hosts route by destination plane: to 10.2/16 out of port 1, to 10.1/16 out of port 2
            for port in (1, 2):
                ipr.route("del", dst=f"10.{port}.0.0", dst_len=16, oif=idx[port], table=254, proto=2, scope=253)
            ipr.route("add", dst="10.2.0.0/16", oif=idx[1], prefsrc=host.addresses[1])
            ipr.route("add", dst="10.1.0.0/16", oif=idx[2], prefsrc=host.addresses[2])
            for ip, mac, via in host.neighbours:
                ipr.neigh("add", dst=ip, lladdr=mac, ifindex=idx[via], state=0x80)  # permanent
        finally:
            ipr.close()


def _build_ovs(plan: DatapathPlan, controller_port: int, created: Created, controller_host: str = "127.0.0.1") -> None:
    """Every switch in one ovsdb transaction, refusing bridges of the same names that are not ours."""
    for name in plan.ovs_ports:
        existing = subprocess.run(["ovs-vsctl", "br-exists", name], capture_output=True).returncode == 0
        if existing:
            raise EnvironmentProblem(f"an Open vSwitch bridge named {name} already exists: run 'testbed clean' "
                                     "(it removes only bridges this project made)")
    cmd = ["ovs-vsctl", "--timeout=120", "--", "--id=@q", "create", "qos", "type=linux-noop",
           f"external_ids:{ALIAS}=1"]
    target = f"tcp:{controller_host}:{controller_port}"  # several hosts: the first host's underlay address
    for name, ports in plan.ovs_ports.items():
        dpid = plan.fabric.switches[name].dpid
        cmd += ["--", "add-br", name, "--", "set", "bridge", name, "datapath_type=netdev", "fail_mode=secure",
                "protocols=OpenFlow13", f"other_config:datapath-id={dpid:016x}",
                "other_config:disable-in-band=true", f"external_ids:{ALIAS}=1"]
        for dev, kind, of_port in ports:
            cmd += ["--", "add-port", name, dev, "--", "set", "interface", dev, f"ofport_request={of_port}"]
            if kind == "afxdp":
                cmd += ["type=afxdp", "options:xdp-mode=generic"]
            else:
                cmd += ["--", "set", "port", dev, "qos=@q"]
        cmd += ["--", "set-controller", name, target,
                "--", "set", "controller", name, "connection_mode=out-of-band", "max_backoff=1000"]
        created.ovs_bridges.append(name)
    run(cmd, timeout=180)
    out = run(["ovs-vsctl", "--format=json", "--columns=_uuid,external_ids", "list", "qos"])
    for uuid, ids in json.loads(out)["data"]:
        if [ALIAS, "1"] in ids[1]:
            created.qos_uuid = uuid[1]


def wait_ovs_ports(plan: DatapathPlan, timeout: float = 60) -> None:
    """Until every OVS interface we added has its OpenFlow port and no error."""
    names = {dev for ports in plan.ovs_ports.values() for dev, _, _ in ports}
    deadline = time.monotonic() + timeout
    bad: list = []
    while time.monotonic() < deadline:
        out = run(["ovs-vsctl", "--format=json", "--columns=name,error,ofport", "list", "interface"])
        rows = [r for r in json.loads(out)["data"] if r[0] in names]
        bad = [r for r in rows if r[2] in (-1, ["set", []]) or (r[1] and r[1] != ["set", []])]
        if len(rows) == len(names) and not bad:
            return
        time.sleep(0.2)
    raise EnvironmentProblem(f"Open vSwitch ports not ready after {timeout:.0f} s: {bad[:3]}")


# ------------------------------------------------------------------ teardown
def teardown(created: Created, left_alone: list[str] | None = None) -> dict:
    """Remove what ``created`` lists and carries our marker (the one ownership check ``clean`` uses too,
    ``inventory``): in-namespace processes first. A listed name that exists without the marker is not ours
    (a stale or forged state file beside someone else's namespace, link or bridge of that name): it is
    left alone and named in ``left_alone``."""
    from testbed.emulation import inventory

    left = left_alone if left_alone is not None else []
    timings = {}
    t = time.monotonic()
    spaces = [n for n in created.netns if netns.exists(n)]
    left += [f"netns {n}" for n in spaces if not inventory.is_our_namespace(n)]
    spaces = [n for n in spaces if inventory.is_our_namespace(n)]
    inventory.kill_in_namespaces(spaces)
    bridges = set(inventory.our_bridges()) if created.ovs_bridges or created.qos_uuid else set()
    left += [f"bridge {b}" for b in created.ovs_bridges if b not in bridges and _bridge_exists(b)]
    ours = [b for b in created.ovs_bridges if b in bridges]
    if ours:
        cmd = ["ovs-vsctl", "--timeout=60"]
        for br in ours:
            cmd += ["--", "--if-exists", "del-br", br]
        subprocess.run(cmd, capture_output=True, timeout=120)
    if created.qos_uuid and created.qos_uuid in inventory.our_qos():
        subprocess.run(["ovs-vsctl", "--if-exists", "destroy", "qos", created.qos_uuid], capture_output=True)
    timings["ovs_s"] = round(time.monotonic() - t, 3)
    t = time.monotonic()
    if spaces:
        subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns delete {n}\n" for n in spaces),
                       text=True, capture_output=True)
    left += [f"link {name}" for name in delete_links(created.links)]
    timings["links_s"] = round(time.monotonic() - t, 3)
    return timings


def _bridge_exists(name: str) -> bool:
    return subprocess.run(["ovs-vsctl", "--timeout=5", "br-exists", name], capture_output=True).returncode == 0


def delete_links(names: list[str]) -> list[str]:
    """Delete the root-namespace devices ``names`` that carry our marker: our whole link group in one kernel
    batch (one RCU grace period instead of one per veth: 0.4 s instead of 4.8 s for ROFT n=32) when every
    member is listed (or a listed veth's twin), then one by one. Returns the names that exist without our
    marker (left alone)."""
    from testbed.emulation import inventory

    ipr = IPRoute()
    foreign = []
    try:
        links = ipr.get_links()
        listed = {link["index"] for link in links if link.get_attr("IFLA_IFNAME") in set(names)}
        group = [link for link in links if link.get_attr("IFLA_GROUP") == LINK_GROUP]
        # the one batch only when it removes nothing unlisted: every member listed, or the veth twin of one
        if group and all(link["index"] in listed or (link.get_attr("IFLA_LINK") in listed
                                                      and link.get_attr("IFLA_LINK_NETNSID") is None)
                         for link in group):
            subprocess.run(["ip", "link", "del", "group", str(LINK_GROUP)], capture_output=True)
        for dev in names:
            for index in ipr.link_lookup(ifname=dev):
                try:
                    link = ipr.get_links(index)[0]
                except Exception:  # gone with its twin meanwhile
                    continue
                if not inventory.is_our_link(link):
                    foreign.append(dev)
                    continue
                try:
                    ipr.link("del", index=index)
                except Exception:  # peer already gone with its twin
                    pass
    finally:
        ipr.close()
    return foreign


def ovs_send_buffer_bytes() -> int | None:
    """Send-buffer size of ovs-vswitchd's AF_PACKET socket (None: not yet made)."""
    pid = subprocess.run(["pidof", "ovs-vswitchd"], capture_output=True, text=True).stdout.split()
    if not pid:
        raise EnvironmentProblem("Open vSwitch is not running: start it with scripts/setup.sh")
    out = subprocess.run(["ss", "-0", "-a", "-m", "-p"], capture_output=True, text=True).stdout
    sizes = []
    text = out.replace("\n\t", " ")
    for line in text.splitlines():
        if f"pid={pid[0]}," in line and "skmem:(" in line:
            for part in line.split("skmem:(")[1].split(")")[0].split(","):
                if part.startswith("tb"):
                    sizes.append(int(part[2:]))
    return max(sizes) if sizes else None
