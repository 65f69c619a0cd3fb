"""``bench datapath``: packets per second per core through one emulated hop, against the kernel's own
veth + Linux bridge forwarding, in the same run.

Emulated hop: the testbed's own fabric (``fabricctl.up``, ZCube n=16, links at ``RATE`` so that no shaper
limits small packets, PFC off) and two GPUs on the same switch; a packet goes through the sender's NIC queue
(tbf + bfifo in its namespace), its veth, the switch's receive bridge and AF_XDP port into OVS (userspace,
the PMD thread), out of the switch's transmit port (AF_PACKET, tbf + bfifo), and the veth into the receiver's
namespace. Kernel hop: two namespaces whose veths meet in a Linux bridge in the root namespace (no qdisc, no
OVS): what the kernel forwards on the same machine with the same endpoints.

Load on each: one ``iperf3`` UDP stream of ``SIZE``-byte datagrams at full speed for ``SECONDS``. Received
packets per second at the receiver, and the cores the hop used: both iperf3 processes, every ovs-vswitchd
thread (the PMD's busy polling included) and the machine's softirq time (``testbed.bench.cpu_use``; others'
processes on the machine are not counted). ``pps_per_core`` = received pps / those cores, and
``ratio`` = emulated pps_per_core / kernel pps_per_core. A sender that cannot fill the hop makes the kernel's
figure a lower bound (``sender_limited``: received >= 98 % of sent).

The document (``--json``; bench.json in its directory)::

  {"bench": "datapath", "size_bytes", "seconds", "load",
   "emulated": {"sent_pps", "received_pps", "lost", "cores": {role: cores}, "hop_cores", "pps_per_core",
                "sender_limited", "path": "gpu1:p1 -> sw.. -> gpu2:p1"},
   "kernel": {... the same keys ...}, "ratio", "dir"}
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from common.errors import EnvironmentProblem, TestbedError
from testbed.bench import cpu_use

RATE_BPS = 1e9  # the most a link may be set to: 64-byte datagrams are ~0.12 Gbit/s at 200 kpps
SIZE = 64
SECONDS = 5
PORT = 5299
KERNEL_NS = ("tb-gpu-dpk-a", "tb-gpu-dpk-b")  # tb-gpu*: 'testbed clean' removes them after a kill
KERNEL_DEVS = ("tb-dpk-br", "tb-dpk-a0", "tb-dpk-b0")
KERNEL_IPS = ("10.250.0.1", "10.250.0.2")
HOP_ROLES = ("iperf3", "ovs pmd", "ovs main", "ovs other", "softirq")


def check(size: int, seconds: float) -> None:
    if not isinstance(size, int) or not 18 <= size <= 1400:
        raise TestbedError(f"--size {size!r}: expected 18 .. 1400 bytes a datagram")
    if not 1 <= seconds <= 120:
        raise TestbedError(f"--seconds {seconds!r}: expected 1 .. 120")


def _udp_result(text: str) -> tuple[int, int, float]:
    """(packets sent, packets lost, seconds) of an ``iperf3 -u -J`` client's output."""
    try:
        s = json.loads(text)["end"]["sum"]
        return int(s["packets"]), int(s["lost_packets"]), float(s["seconds"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise EnvironmentProblem(f"iperf3 printed no UDP result: {text.strip()[-200:]}") from None


def figures(sent: int, lost: int, seconds: float, cores: dict) -> dict:
    hop = round(sum(cores.get(r, 0.0) for r in HOP_ROLES), 3)
    received = sent - lost
    rx_pps = received / seconds if seconds > 0 else 0.0
    return {"sent_pps": round(sent / seconds) if seconds > 0 else 0, "received_pps": round(rx_pps), "lost": lost,
            "cores": cores, "hop_cores": hop, "pps_per_core": round(rx_pps / hop) if hop > 0 else None,
            "sender_limited": sent > 0 and received >= 0.98 * sent}


def blast(src_ns: str, dst_ns: str, dst_ip: str, size: int, seconds: float) -> dict:
    """One iperf3 UDP stream at full speed from ``src_ns`` to ``dst_ip`` in ``dst_ns``: its figures."""
    server = subprocess.Popen(["ip", "netns", "exec", dst_ns, "iperf3", "-s", "-1", "-p", str(PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        with cpu_use.Window(every_s=0.5) as w:
            client = subprocess.run(["ip", "netns", "exec", src_ns, "iperf3", "-c", dst_ip, "-p", str(PORT), "-u",
                                     "-b", "0", "-l", str(size), "-t", str(seconds), "-J"],
                                    capture_output=True, text=True, timeout=seconds + 30)
        sent, lost, span = _udp_result(client.stdout)
    finally:
        server.kill()
        server.wait()
    return figures(sent, lost, span, w.cores)


def emulated_hop(size: int, seconds: float, log) -> dict:
    from fabrics import addressing
    from fabrics.datapath import DatapathConfig, netns_of
    from fabrics.routing import forwarding_tables, links_on_path
    from testbed.emulation import fabricctl

    args = {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8}
    cfg = DatapathConfig(rate_bps=RATE_BPS, buffer_bytes=1_000_000, burst_bytes=100_000).validate()
    st = fabricctl.up(args, cfg, log=log)
    try:
        fabric = st.model()
        tables = forwarding_tables(fabric)
        dst = next(g for g in range(2, fabric.n_gpus + 1) if links_on_path(fabric, (1, 1), (g, 1), tables) == 2)
        log(f"emulated hop: gpu1:p1 -> one switch -> gpu{dst}:p1, {seconds:g} s of {size}-byte datagrams")
        out = blast(netns_of(1), netns_of(dst), addressing.ip_of(dst, 1), size, seconds)
        out["path"] = f"gpu1:p1 -> one switch (NIC tbf+bfifo, bridge, AF_XDP, OVS, tbf+bfifo) -> gpu{dst}:p1"
    finally:
        fabricctl.down()
    return out


def _ip(*argv: str, check: bool = True) -> None:
    subprocess.run(["ip", *argv], check=check, capture_output=True)


def kernel_hop(size: int, seconds: float, log) -> dict:
    from fabrics.datapath import ALIAS, LINK_GROUP

    remove_kernel_hop()
    try:
        _ip("link", "add", KERNEL_DEVS[0], "type", "bridge")
        for i, ns in enumerate(KERNEL_NS):
            _ip("netns", "add", ns)
            root, inner = KERNEL_DEVS[1 + i], f"{KERNEL_DEVS[1 + i]}n"
            _ip("link", "add", root, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", root, "master", KERNEL_DEVS[0], "up")
            _ip("-n", ns, "addr", "add", f"{KERNEL_IPS[i]}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        for dev in KERNEL_DEVS:
            _ip("link", "set", dev, "alias", ALIAS, "group", str(LINK_GROUP))
        _ip("link", "set", KERNEL_DEVS[0], "up")
        log(f"kernel hop: veth -> Linux bridge -> veth, {seconds:g} s of {size}-byte datagrams")
        out = blast(KERNEL_NS[0], KERNEL_NS[1], KERNEL_IPS[1], size, seconds)
        out["path"] = "ns a -> veth -> Linux bridge -> veth -> ns b"
        return out
    finally:
        remove_kernel_hop()


def remove_kernel_hop() -> None:
    for dev in KERNEL_DEVS:
        _ip("link", "del", dev, check=False)
    for ns in KERNEL_NS:
        _ip("netns", "del", ns, check=False)


def run_bench(size: int, seconds: float, out: Path, log) -> dict:
    from testbed.emulation import fabricctl

    check(size, seconds)
    fabricctl.require_root()
    out.mkdir(parents=True, exist_ok=True)
    doc = {"bench": "datapath", "size_bytes": size, "seconds": seconds, "load": cpu_use.load_line()}
    doc["kernel"] = kernel_hop(size, seconds, log)
    doc["emulated"] = emulated_hop(size, seconds, log)
    k, e = doc["kernel"]["pps_per_core"], doc["emulated"]["pps_per_core"]
    doc["ratio"] = round(e / k, 4) if k and e else None
    doc["load_after"] = cpu_use.load_line()
    doc["dir"] = str(out)
    (out / "bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def table(doc: dict) -> list[str]:
    out = [f"bench datapath: one hop, {doc['size_bytes']}-byte UDP datagrams at full speed for {doc['seconds']:g} s "
           f"({doc['load']})",
           f"{'hop':<10}{'sent pps':>10}{'received pps':>14}{'hop cores':>11}{'pps/core':>10}  path"]
    for name in ("emulated", "kernel"):
        r = doc[name]
        out.append(f"{name:<10}{r['sent_pps']:>10,}{r['received_pps']:>14,}{r['hop_cores']:>11.2f}"
                   f"{(r['pps_per_core'] or 0):>10,}  {r['path']}"
                   + ("  (sender-limited: a lower bound)" if r["sender_limited"] and name == "kernel" else ""))
    out.append(f"emulated / kernel, packets per second per core: {doc['ratio']}")
    return out
