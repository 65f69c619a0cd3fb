#!/usr/bin/env python3
"""Measurements behind docs/multihost.md (root, under the machine-wide lock; each brings its
pseudo-hosts up and removes them again):

  pmd     what an Open vSwitch PMD per instance costs: 2 pseudo-hosts with a ZCube n=8 fabric each,
          idle CPU of each ovs-vswitchd, what two CPU-bound processes (one per core) still get, ping
          RTT and one TCP flow through a fabric, for pmd-maxsleep 0 / 500 and PMDs on core 0 / anywhere
  tunnel  one cable through a gretap tunnel between two pseudo-hosts against the same cable on one:
          rate and queueing delay under UDP overload, drops at the buffer, TCP goodput
  xpause  a PFC pause across hosts (the real pfcd and queue_watch on both) against the same on one

    sudo flock /tmp/testbed-heavy.lock .venv/bin/python scripts/multihost_probe.py pmd|tunnel|xpause [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.emulation.hosts import hostsfile, pseudo, remote  # noqa: E402
from traffic.model.metrics import percentile  # noqa: E402

PY = sys.executable
ME = str(Path(__file__).resolve())


def sessions() -> dict[str, remote.Session]:
    hosts = hostsfile.load(pseudo.hosts_path())
    return {h.name: remote.Session(h) for h in hosts.hosts}


def sh(s: remote.Session, script: str, timeout: float = 120) -> str:
    res = s.run(f"bash -euc {shlex.quote(script)}", timeout=timeout)
    if res.rc:
        raise SystemExit(f"{s.host.name}: {script.splitlines()[0][:60]}...: {res.last_error}")
    return res.out


def parallel(fns):
    with ThreadPoolExecutor(len(fns)) as pool:
        return [f.result() for f in [pool.submit(fn) for fn in fns]]


# ------------------------------------------------------------------- CPU probes
def spin(seconds: float = 5.0) -> list[float]:
    """Loop iterations per second (millions) of one busy process pinned to each core: what a CPU-bound
    agent gets."""
    cores = sorted(os.sched_getaffinity(0))
    procs = []
    for c in cores:
        code = (f"import os,time;os.sched_setaffinity(0,{{{c}}});n=0;t=time.monotonic()+{seconds}\n"
                "while time.monotonic()<t:\n n+=1\nprint(n)")
        procs.append(subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True))
    return [round(int(p.communicate()[0]) / seconds / 1e6, 3) for p in procs]


def _ns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def vswitchd_cpu(seconds: float = 10.0) -> dict[str, dict]:
    """CPU (cores busy) of each pseudo-host's ovs-vswitchd over ``seconds``, and of its PMD threads."""
    inode = {_ns_inode(f"/run/netns/{pseudo.NETNS_PREFIX}{i}"): f"ph{i}" for i in range(1, 9)}
    pids = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                if Path(f"/proc/{e}/comm").read_text().strip() == "ovs-vswitchd":
                    host = inode.get(_ns_inode(f"/proc/{e}/ns/net"))
                    if host:
                        pids[host] = int(e)
            except OSError:
                pass

    def ticks(pid):
        total, pmd = 0, 0
        for t in os.listdir(f"/proc/{pid}/task"):
            st = Path(f"/proc/{pid}/task/{t}/stat").read_text()
            name = st[st.index("(") + 1:st.rindex(")")]
            f = st[st.rindex(")") + 2:].split()
            v = int(f[11]) + int(f[12])
            total += v
            if name.startswith("pmd"):
                pmd += v
        return total, pmd

    a = {h: ticks(p) for h, p in pids.items()}
    m0 = machine()
    time.sleep(seconds)
    m1 = machine()
    b = {h: ticks(p) for h, p in pids.items()}
    hz = os.sysconf("SC_CLK_TCK")
    out = {h: {"vswitchd_cores": round((b[h][0] - a[h][0]) / hz / seconds, 3),
               "pmd_cores": round((b[h][1] - a[h][1]) / hz / seconds, 3)} for h in sorted(pids)}
    out["machine"] = {k: round((m1[k] - m0[k]) / hz / seconds, 3) for k in m0}
    return out


def machine() -> dict:
    """Machine-wide CPU ticks from /proc/stat: busy (all but idle and iowait) and steal."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return {"busy_cores": sum(f) - f[3] - f[4] - f[7], "steal_cores": f[7]}


# ------------------------------------------------------------------------- pmd
FABRIC_UP = "cd {repo} && {py} -m testbed up zcube --gpus 8 --gpus-per-switch 4 --rate 1gbit >/dev/null"


def _maxsleep_cmd(maxsleep: int | None) -> str:
    if maxsleep is None:
        return "ovs-vsctl remove open_vswitch . other_config pmd-maxsleep"
    return f"ovs-vsctl set open_vswitch . other_config:pmd-maxsleep={maxsleep}"


def _ping(s, n: int = 300) -> dict:
    out = sh(s, f"cd {REPO} && {PY} -m testbed exec gpu1 -- ping -c {n} -i 0.01 10.2.0.5")
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]
    return {"n": len(rtts), "p50_ms": percentile(rtts, 50), "p99_ms": percentile(rtts, 99), "max_ms": max(rtts)}


def _iperf(s, seconds: int = 5) -> float:
    sh(s, f"cd {REPO} && {PY} -m testbed exec gpu5 -- iperf3 -s -1 -D -B 10.2.0.5")
    time.sleep(0.5)
    out = sh(s, f"cd {REPO} && {PY} -m testbed exec gpu1 -- iperf3 -c 10.2.0.5 -t {seconds} -J", timeout=60)
    return round(json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6, 1)


def _pmd_cores(s) -> str:
    out = s.run("ovs-appctl dpif-netdev/pmd-rxq-show").out
    return ",".join(sorted(set(re.findall(r"core_id (\d+)", out)))) or "-"


def pmd_scenario(cores: str | None, maxsleep: int | None, fabrics: int = 2) -> dict:
    pseudo.up(2, pmd_cores=cores, pmd_maxsleep_us=maxsleep, log=lambda m: None)
    try:
        ss = sessions()
        t = time.monotonic()
        parallel([lambda s=s: sh(s, FABRIC_UP.format(repo=REPO, py=PY)) for s in list(ss.values())[:fabrics]])
        up_s = round(time.monotonic() - t, 1)
        for s in ss.values():  # 'up' sets pmd-maxsleep=500 for its fabric: put the scenario's back
            s.run(_maxsleep_cmd(maxsleep))
        time.sleep(2)
        out = {"pmd_cores_setting": cores or "any", "pmd_maxsleep_us": maxsleep, "fabrics_up_s": up_s,
               "pmd_on_core": {h: _pmd_cores(s) for h, s in ss.items()}}
        out["idle"] = vswitchd_cpu(10)
        m0 = machine()
        out["spin_Miter_s_per_core"] = spin(5)
        m1 = machine()
        out["during_spin"] = {k: round((m1[k] - m0[k]) / os.sysconf("SC_CLK_TCK") / 5, 3) for k in m0}
        out["ping_ph1"] = _ping(ss["ph1"])
        out["tcp_ph1_mbit"] = _iperf(ss["ph1"])
        for s in list(ss.values())[:fabrics]:
            sh(s, f"cd {REPO} && {PY} -m testbed down >/dev/null")
        for s in ss.values():
            s.close()
        return out
    finally:
        pseudo.down()


def cmd_pmd(args) -> dict:
    m0 = machine()
    doc = {"baseline_spin_Miter_s_per_core": spin(5), "scenarios": []}
    m1 = machine()
    doc["baseline_during_spin"] = {k: round((m1[k] - m0[k]) / os.sysconf("SC_CLK_TCK") / 5, 3) for k in m0}
    for cores, maxsleep in (("0", 0), (None, 0), ("0", 500), (None, 500)):
        r = pmd_scenario(cores, maxsleep)
        doc["scenarios"].append(r)
        if not args.json:
            print(json.dumps(r), flush=True)
    return doc


# ---------------------------------------------------------------------- tunnel
CABLE_SIDE = """
ip netns add {ns}
ip link add {a} mtu {mtu} type veth peer name {a}u mtu {mtu}
ip link set {a} netns {ns}
ip -n {ns} link set lo up
ip -n {ns} link set {a} up
ip -n {ns} addr add {ip}/24 dev {a}
ip link set {a}u up
ip netns exec {ns} ethtool -K {a} tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
ethtool -K {a}u tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
ip netns exec {ns} tc qdisc replace dev {a} root handle 1: tbf rate {kbit}kbit burst {burst} limit {buf}
ip netns exec {ns} tc qdisc replace dev {a} parent 1:1 handle 10: bfifo limit {buf}
tc qdisc replace dev {a}u clsact
"""


def _redirect(frm: str, to: str) -> str:
    return (f"tc qdisc replace dev {frm} clsact\n"
            f"tc filter add dev {frm} ingress protocol all prio 2 u32 match u32 0 0 "
            f"action mirred egress redirect dev {to}\n")


def _tunnel_setup(ss, rate_bps: float, mtu: int = 3000, buf: int = 60000, burst: int = 18000) -> None:
    from testbed.emulation.hosts import tunnels

    kw = {"mtu": mtu, "kbit": int(rate_bps / 1e3), "buf": buf, "burst": burst}
    p1, p2 = ss["ph1"], ss["ph2"]
    a1, a2 = p1.host.address, p2.host.address
    # local cable on ph1: snd/s0 -> s0u => r0u -> rcv/r0 ; cross cable: snd/s1 -> s1u => tbt1 ==> ph2 tbt1 => r1u
    t1 = tunnels.Tunnel(1, "tbt1", ("s1", 1), ("r1", 1), "ph2", "s1u", None, "s1u")
    t2 = tunnels.Tunnel(1, "tbt1", ("r1", 1), ("s1", 1), "ph1", "r1u", None, "r1u")
    ph1 = (CABLE_SIDE.format(ns="snd", a="s0", ip="10.9.0.1", **kw) + CABLE_SIDE.format(ns="snd", a="s1",
           ip="10.9.1.1", **kw).replace("ip netns add snd\n", "") + CABLE_SIDE.format(ns="rcv", a="r0",
           ip="10.9.0.2", **kw))
    ph1 += "".join(f"ip {line}\n" for line in tunnels.link_lines([t1], a1, {"ph2": a2}, mtu))
    ph1 += _redirect("s0u", "r0u") + _redirect("r0u", "s0u") + _redirect("s1u", "tbt1") + _redirect("tbt1", "s1u")
    ph2 = CABLE_SIDE.format(ns="rcv", a="r1", ip="10.9.1.2", **kw)
    ph2 += "".join(f"ip {line}\n" for line in tunnels.link_lines([t2], a2, {"ph1": a1}, mtu))
    ph2 += _redirect("r1u", "tbt1") + _redirect("tbt1", "r1u")
    parallel([lambda: sh(p1, ph1), lambda: sh(p2, ph2)])


def udp_send(dst: str, port: int, rate_bps: float, seconds: float, size: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    gap = size * 8 / rate_bps
    pad = b"\0" * (size - 16)
    t0 = time.monotonic()
    seq = 0
    while True:
        due = t0 + seq * gap
        now = time.monotonic()
        if now - t0 > seconds:
            break
        if due > now:
            time.sleep(due - now)
        s.sendto(struct.pack("!QQ", seq, time.monotonic_ns()) + pad, (dst, port))
        seq += 1
    print(seq)


def udp_recv(port: int, seconds: float) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("0.0.0.0", port))
    s.settimeout(1.0)
    got = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            buf = s.recv(65536)
        except socket.timeout:
            continue
        seq, sent = struct.unpack_from("!QQ", buf)
        got.append((time.monotonic_ns(), sent, len(buf)))
    print(json.dumps(got))


def _udp_run(ss, host: str, dst: str, rate_bps: float, seconds: float, size: int) -> dict:
    recv_host = ss[host]
    cmd_r = f"ip netns exec rcv {PY} {ME} _udprecv --port 5001 --seconds {seconds + 3}"
    cmd_s = f"ip netns exec snd {PY} {ME} _udpsend --dst {dst} --port 5001 --rate {2 * rate_bps} " \
            f"--seconds {seconds} --size {size}"
    with ThreadPoolExecutor(2) as pool:
        fr = pool.submit(sh, recv_host, cmd_r, seconds + 30)
        time.sleep(1.0)
        sent = int(sh(ss["ph1"], cmd_s, seconds + 30).strip())
        got = json.loads(fr.result())
    wire = size + 28 + 14  # UDP + IP + Ethernet: what tbf counts
    t_first = got[0][0]
    steady = [g for g in got if g[0] - t_first > 2e9]  # after the buffer filled
    dur = (steady[-1][0] - steady[0][0]) / 1e9
    rate = (len(steady) - 1) * wire * 8 / dur
    delays = [(g[0] - g[1]) / 1e6 for g in steady]
    return {"sent": sent, "received": len(got), "rate_mbit": round(rate / 1e6, 4),
            "rate_of_link": round(rate / rate_bps, 4),
            "delay_ms": {"p50": round(percentile(delays, 50), 2), "p99": round(percentile(delays, 99), 2),
                         "max": round(max(delays), 2)}}


def _qdisc_stats(s, ns: str, dev: str) -> dict:
    out = sh(s, f"ip netns exec {ns} tc -s -j qdisc show dev {dev}")
    for q in json.loads(out):
        if q.get("kind") == "bfifo":
            return {"drops": q.get("drops"), "sent_pkts": q.get("packets"), "backlog_max_now": q.get("backlog")}
    return {}


def _tcp_run(ss, host: str, dst: str, seconds: int = 8) -> float:
    sh(ss[host], f"ip netns exec rcv iperf3 -s -1 -D -B {dst}")
    time.sleep(0.5)
    out = sh(ss["ph1"], f"ip netns exec snd iperf3 -c {dst} -t {seconds} -J", timeout=60)
    return round(json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6, 4)


def cmd_tunnel(args) -> dict:
    doc = {"rates": []}
    for rate in (3e6, 100e6):
        pseudo.up(2, log=lambda m: None)
        try:
            ss = sessions()
            _tunnel_setup(ss, rate)
            size = 2972  # a full 3000-byte IP packet
            row = {"rate_mbit": rate / 1e6, "buffer_bytes": 60000,
                   "ideal_full_buffer_delay_ms": round(60000 * 8 / rate * 1e3, 2)}
            row["local_udp"] = _udp_run(ss, "ph1", "10.9.0.2", rate, 8, size)
            row["local_udp"]["queue"] = _qdisc_stats(ss["ph1"], "snd", "s0")
            row["tunnel_udp"] = _udp_run(ss, "ph2", "10.9.1.2", rate, 8, size)
            row["tunnel_udp"]["queue"] = _qdisc_stats(ss["ph1"], "snd", "s1")
            row["local_tcp_mbit"] = _tcp_run(ss, "ph1", "10.9.0.2")
            row["tunnel_tcp_mbit"] = _tcp_run(ss, "ph2", "10.9.1.2")
            row["underlay_bytes"] = sh(ss["ph1"], "cat /sys/class/net/eth0/statistics/tx_bytes").strip()
            doc["rates"].append(row)
            if not args.json:
                print(json.dumps(row), flush=True)
            for s in ss.values():
                s.close()
        finally:
            pseudo.down()
    return doc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("probe", choices=["pmd", "tunnel", "xpause", "_udpsend", "_udprecv"])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dst")
    ap.add_argument("--port", type=int, default=5001)
    ap.add_argument("--rate", type=float)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--size", type=int, default=1400)
    args = ap.parse_args()
    if args.probe == "_udpsend":
        udp_send(args.dst, args.port, args.rate, args.seconds, args.size)
        return 0
    if args.probe == "_udprecv":
        udp_recv(args.port, args.seconds)
        return 0
    doc = {"pmd": cmd_pmd, "tunnel": cmd_tunnel, "xpause": cmd_xpause}[args.probe](args)
    if args.json:
        print(json.dumps(doc, indent=1))
    return 0


XP_DIR = "/run/tb-pseudo/xp"  # visible on every pseudo-host (their /tmp is private)


def _xp_policy(queues: dict, rate: float, mtu: int, burst: int, host_dir: str, **extra) -> dict:
    return {"rate_bps": rate, "mtu": mtu, "burst_bytes": burst, "poll_us": 500, "nics": {},
            "log": f"{host_dir}/pfc.txt", "status": f"{host_dir}/pfc_status.json", "queues": queues, **extra}


def _xp_setup(ss, cross: bool, rate: float, obj: str, mtu=3000, buf=60000, burst=18000) -> dict:
    """Sender NIC queue T (snd/s1, tbf at 1.5 x rate, on ph1) -> [tunnel ->] switch-like queue Q (q1 on ph1
    or ph2, tbf at rate, PFC-watched) -> receiver. Q's XOFF pauses T: by 802.1Qbb frame when cross."""
    from pfc import policy as P
    from pfc.policy import with_burst_headroom
    from testbed.emulation.hosts import tunnels

    cfg = with_burst_headroom(P.PfcConfig(enabled=True), rate, mtu, burst)
    res = P.resolve(cfg, rate, mtu, buf)
    limit = P.queue_limit(res, 1)
    qh = "ph2" if cross else "ph1"
    p1, pq = ss["ph1"], ss[qh]
    kw = {"mtu": mtu, "burst": burst}
    a = CABLE_SIDE.format(ns="snd", a="s1", ip="10.9.1.1", kbit=int(1.5 * rate / 1e3), buf=buf, **kw)
    a += f"tc filter add dev s1u ingress prio 1 bpf da obj {obj} sec tc/dequeue\n"
    q = CABLE_SIDE.format(ns="rcv", a="r1", ip="10.9.1.2", kbit=int(100 * rate / 1e3), buf=10 * buf, **kw)
    q += "ip -n rcv link set r1 address 02:00:00:09:01:02\n"  # one-way path: no ARP reply comes back
    a += "ip -n snd neigh replace 10.9.1.2 lladdr 02:00:00:09:01:02 dev s1 nud permanent\n"
    q += (f"ip link add q1 mtu {mtu} type veth peer name q1r mtu {mtu}\nip link set q1 up\nip link set q1r up\n"
          "ethtool -K q1 tx off rx off tso off gso off gro off >/dev/null 2>&1 || true\n"
          "ethtool -K q1r tx off rx off tso off gso off gro off >/dev/null 2>&1 || true\n"
          f"tc qdisc replace dev q1 root handle 1: tbf rate {int(rate / 1e3)}kbit burst {burst} limit {limit}\n"
          f"tc qdisc replace dev q1 parent 1:1 handle 10: bfifo limit {limit}\n"
          f"tc qdisc replace dev q1 clsact\ntc filter add dev q1 egress prio 1 bpf da obj {obj} sec tc/enqueue\n"
          f"tc qdisc replace dev q1r clsact\ntc filter add dev q1r ingress prio 1 bpf da obj {obj} sec tc/dequeue\n"
          "tc filter add dev q1r ingress protocol all prio 2 u32 match u32 0 0 action mirred egress redirect "
          "dev r1u\n")
    t_q = {"kind": "nic", "dev": "s1", "netns": "snd", "peer": "s1u", "limit": buf}
    q_q = {"kind": "switch", "dev": "q1", "netns": None, "peer": "q1r", "limit": limit, "xoff": res.xoff_bytes,
           "xon": res.xon_bytes, "feeders": ["snd:p1"], "sources": {}}
    d1, dq = f"{XP_DIR}/ph1", f"{XP_DIR}/{qh}"
    if cross:
        a1, a2 = p1.host.address, pq.host.address
        t1 = tunnels.Tunnel(1, "tbt1", ("snd", 1), ("swq", 1), "ph2", "s1u", None, "s1u")
        t2 = tunnels.Tunnel(1, "tbt1", ("swq", 1), ("snd", 1), "ph1", "q1r", None, None)
        a += "".join(f"ip {ln}\n" for ln in tunnels.link_lines([t1], a1, {"ph2": a2}, mtu))
        a += _redirect("s1u", "tbt1").replace("tc qdisc replace dev s1u clsact\n", "")
        q = "".join(f"ip {ln}\n" for ln in tunnels.link_lines([t2], a2, {"ph1": a1}, mtu)) + q
        q += "tc qdisc replace dev tbt1 clsact\ntc filter add dev tbt1 ingress protocol all prio 2 u32 match " \
             "u32 0 0 action mirred egress redirect dev q1\n"
        pols = {"ph1": _xp_policy({"snd:p1": t_q}, rate, mtu, burst, d1, pause_rx={"tbt1": "snd:p1"}),
                qh: _xp_policy({"swq:1": q_q}, rate, mtu, burst, dq, remote_feeders={"snd:p1": "tbt1"})}
        parallel([lambda: sh(p1, a), lambda: sh(pq, q)])
    else:
        a += _redirect("s1u", "q1").replace("tc qdisc replace dev s1u clsact\n", "")
        pols = {"ph1": _xp_policy({"snd:p1": t_q, "swq:1": q_q}, rate, mtu, burst, d1)}
        sh(p1, q + a)
    for h, pol in pols.items():
        d = Path(f"{XP_DIR}/{h}")
        d.mkdir(parents=True, exist_ok=True)
        (d / "policy.json").write_text(json.dumps(pol, indent=1))
        (d / "state.json").write_text("{}")  # pfcd runs while its fabric's state file exists
    return {"xoff": res.xoff_bytes, "xon": res.xon_bytes, "limit": limit, "hosts": sorted(pols)}


def _lat_lines(path: Path) -> dict:
    out = {"pause": [], "resume": [], "reaction": []}
    for line in path.read_text().splitlines() if path.exists() else []:
        kind, tx, cause, crossed, noticed, seen, lat = line.split()[:7]
        out[kind].append(float(lat))
        if kind == "pause":
            out["reaction"].append((int(noticed) - int(crossed)) / 1e6)
    return out


def _pct(vals: list[float]) -> dict:
    if not vals:
        return {"n": 0}
    return {"n": len(vals), "p50": round(percentile(vals, 50), 3), "p99": round(percentile(vals, 99), 3),
            "max": round(max(vals), 3)}


def xpause_scenario(cross: bool, rate: float = 3e6, seconds: float = 20) -> dict:
    pseudo.up(2, log=lambda m: None)
    try:
        from pfc import queue_watch

        obj = queue_watch.compile_object(Path("/run/tb-pseudo/queue_watch.o"))
        ss = sessions()
        info = _xp_setup(ss, cross, rate, str(obj))
        pids = {}
        for h in info["hosts"]:
            pids[h] = int(sh(ss[h], f"cd {REPO}; nohup {PY} -m pfc.pfcd --policy {XP_DIR}/{h}/policy.json "
                                    f"> {XP_DIR}/{h}/pfcd.log 2>&1 < /dev/null & echo $!").strip())
        for h in info["hosts"]:
            deadline = time.monotonic() + 20
            while not Path(f"{XP_DIR}/{h}/pfc_status.json").exists():
                if time.monotonic() > deadline:
                    raise SystemExit(f"{h}: pfcd not ready: {Path(f'{XP_DIR}/{h}/pfcd.log').read_text()[-300:]}")
                time.sleep(0.1)
        qh = "ph2" if cross else "ph1"
        with ThreadPoolExecutor(2) as pool:
            fr = pool.submit(sh, ss[qh], f"ip netns exec rcv {PY} {ME} _udprecv --port 5001 --seconds "
                                         f"{seconds + 3}", seconds + 60)
            time.sleep(1.0)
            sh(ss["ph1"], f"ip netns exec snd {PY} {ME} _udpsend --dst 10.9.1.2 --port 5001 --rate {1.8 * rate} "
                          f"--seconds {seconds} --size 2972", seconds + 60)
            got = json.loads(fr.result())
        q_stats = json.loads(sh(ss[qh], "tc -s -j qdisc show dev q1"))
        q_drops = sum(x.get("drops", 0) for x in q_stats if x.get("kind") == "bfifo")
        for h in info["hosts"]:
            ss[h].run(f"kill -TERM {pids[h]}")  # the daemon we started (its PID on that pseudo-host)
        time.sleep(1.5)
        lat = _lat_lines(Path(f"{XP_DIR}/ph1/pfc_latency.txt"))
        status = {h: json.loads(Path(f"{XP_DIR}/{h}/pfc_status.json").read_text()) for h in info["hosts"]}
        out = {"cross_host": cross, "rate_mbit": rate / 1e6, **{k: info[k] for k in ("xoff", "xon", "limit")},
               "pause_latency_ms": _pct(lat["pause"]), "resume_latency_ms": _pct(lat["resume"]),
               "reaction_ms": _pct(lat["reaction"]), "q_drops": q_drops, "delivered": len(got),
               "pauses": status["ph1"]["pauses"], "resumes": status["ph1"]["resumes"],
               "scheduling": {h: st.get("scheduling") for h, st in status.items()},
               "loop_gaps": {h: st.get("loop_gaps") for h, st in status.items()}}
        if cross:
            out["frames"] = {"sent_by_ph2": status["ph2"].get("remote", {}).get("sent"),
                             "received_by_ph1": status["ph1"].get("remote_rx")}
        for s in ss.values():
            s.close()
        return out
    finally:
        pseudo.down()


def cmd_xpause(args) -> dict:
    doc = {"scenarios": []}
    for cross in (False, True):
        r = xpause_scenario(cross, seconds=args.seconds)
        doc["scenarios"].append(r)
        if not args.json:
            print(json.dumps(r), flush=True)
    return doc


if __name__ == "__main__":
    sys.exit(main())
