"""The containerlab-like verbs on one fabric at a time: up, down, exec, status, clean.

State of the running fabric (what was built, controller PID and port,
timings) is in ``$TESTBED_STATE_DIR`` (default /run/zcube-testbed), together
with the controller's config, log and status file. ``up`` either returns with
a ready fabric or removes everything it made, also on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from testbed import netns
from testbed.datapath import ALIAS, NETNS_PREFIX, DatapathConfig, DatapathPlan, plan_datapath
from testbed.emulation import build
from testbed.errors import EnvironmentProblem, TestbedError
from testbed.fabric import Fabric, build_fabric

READY_TIMEOUT_S = 60


def state_dir() -> Path:
    return Path(os.environ.get("TESTBED_STATE_DIR", "/run/zcube-testbed"))


def state_file() -> Path:
    return state_dir() / "state.json"


def require_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("this verb needs root (network namespaces, Open vSwitch): run it with sudo")


def require_ovs() -> None:
    proc = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True)
    if proc.returncode:
        raise EnvironmentProblem("Open vSwitch is not running: start it with scripts/setup.sh "
                                 "(or /usr/share/openvswitch/scripts/ovs-ctl start)")


def load_state() -> dict | None:
    try:
        return json.loads(state_file().read_text())
    except FileNotFoundError:
        return None


def require_state() -> dict:
    st = load_state()
    if st is None:
        raise TestbedError("no fabric is up: start one with 'testbed up zcube' or 'testbed up roft'")
    return st


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fabric_of_state(st: dict) -> Fabric:
    return build_fabric(**st["fabric"])


# ----------------------------------------------------------------------- up
def up(fabric_args: dict, config: DatapathConfig, miswire: tuple[str, str] | None = None,
       log=print, pfc=None) -> dict:
    """Build, program and verify a fabric; return its state. Raises on failure
    after removing everything it made. ``pfc``: a PfcConfig (None or disabled:
    lossy queues, no pause)."""
    fabric = build_fabric(**fabric_args)  # bad parameters fail before anything is touched
    plan = plan_datapath(fabric, config)
    pfc_on = pfc is not None and pfc.enabled
    limits: dict[str, int] = {}
    if pfc_on:
        from controller.pfc import launch
        from controller.pfc import policy as pfc_policy

        pfc = launch.with_burst_headroom(pfc, config.rate_bps, config.mtu, config.burst_bytes)
        resolved = pfc_policy.resolve(pfc, config.rate_bps, config.mtu, config.buffer_bytes)  # bad thresholds fail here
        limits = {q: th["limit"] for q, th in pfc_policy.thresholds(fabric, resolved).items()}
    if miswire:
        _miswire(plan, *miswire)
    require_root()
    require_ovs()
    existing = load_state()
    if existing is not None:
        if _alive(existing.get("controller_pid")) or any(netns.exists(n) for n in existing["created"]["netns"]):
            raise TestbedError(f"a fabric is already up ({existing['fabric']['kind']}, "
                               f"{existing['fabric']['gpus']} GPUs): run 'testbed down' first")
        raise TestbedError("a stale fabric state was left behind: run 'testbed clean' first")

    t0 = time.monotonic()
    sdir = state_dir()
    sdir.mkdir(parents=True, exist_ok=True)
    for leftover in ("status.json", "controller.log", "pfc.txt", "pfc_latency.txt", "pfc_gaps.txt", "pfc_status.json",
                     "pfcd.log"):
        (sdir / leftover).unlink(missing_ok=True)
    created = build.Created()
    port = _free_port()
    st = {"fabric": {"kind": fabric.kind, **_fabric_kwargs(fabric)}, "config": asdict(config),
          "controller_port": port, "controller_pid": None, "created": created.as_dict(),
          "queues": [asdict(q) for q in plan.queues], "timings": {}, "warnings": [],
          "state_dir": str(sdir), "pfc": asdict(pfc) if pfc is not None else {"enabled": False},
          "queue_limits": limits}
    _save(st)  # from here on, 'clean' can find what exists even if this process dies
    timings = st["timings"]
    ovs_settings: dict = {}
    try:
        st["controller_pid"] = _start_controller(st, sdir)
        _save(st)
        restore_wmem = _prepare_ovs_send_buffer(st)
        ovs_settings = _set_ovs_tuning()
        st["ovs_restore"] = ovs_settings
        bpf_obj = None
        if pfc_on:
            from controller.pfc import attach

            attach.ensure_bpffs()
            attach.remove_pins()
            bpf_obj = attach.compile_object(sdir / "queue_watch.o")
        try:
            build.build(plan, port, created, timings, limits, bpf_obj)
        finally:
            st["created"] = created.as_dict()
            _save(st)
        build.wait_ovs_ports(plan)
        status = _wait_ready(st, fabric, log)
        timings["controller_ready_s"] = round(time.monotonic() - t0, 3)
        _first_send(plan)
        if restore_wmem is not None:
            build._write("/proc/sys/net/core/wmem_default", restore_wmem)
        if (build.ovs_send_buffer_bytes() or 0) < build.OVS_SNDBUF_BYTES // 2:
            st["warnings"].append("ovs-vswitchd's AF_PACKET send buffer is small: switch queues will drop "
                                  "silently inside OVS; restart OVS with no other bridges to fix")
        st["controller_status"] = {"miss_packets": status["miss_packets"], "cabling": status["cabling"]}
        timings["up_s"] = round(time.monotonic() - t0, 3)
        _save(st)
        return st
    except BaseException:
        if os.environ.get("TESTBED_KEEP_ON_FAILURE"):
            log("up failed: TESTBED_KEEP_ON_FAILURE is set, leaving it for inspection ('testbed clean' removes it)")
            raise
        log("up failed: removing what was built")
        _stop_pfc(st)
        _stop_controller(st.get("controller_pid"))
        build.teardown(created)
        _restore_ovs_tuning(ovs_settings)
        state_file().unlink(missing_ok=True)
        raise


def _fabric_kwargs(f: Fabric) -> dict:
    p = dict(f.params)
    out = {"gpus": p["gpus"]}
    if f.kind == "zcube":
        out.update(gpus_per_switch=p["gpus_per_switch"], cables=p["cables"])
    else:
        out.update(gpus_per_server=p["gpus_per_server"], radix=p["radix"])
    return out


def _save(st: dict) -> None:
    tmp = state_file().with_suffix(".tmp")
    tmp.write_text(json.dumps(st, indent=1))
    os.replace(tmp, state_file())


def _miswire(plan: DatapathPlan, port_a: str, port_b: str) -> None:
    """Testing aid: swap where two switch transmit ports' cables arrive."""
    far = {f"{port_a}r": None, f"{port_b}r": None}
    for br, slaves in plan.bridges.items():
        for dev in slaves:
            if dev in far:
                far[dev] = br
    missing = [d[:-1] for d, br in far.items() if br is None]
    if missing:
        raise TestbedError(f"--miswire port {missing[0]!r} is not a switch-to-switch port of this fabric")
    (da, ba), (db, bb) = far.items()
    plan.bridges[ba][plan.bridges[ba].index(da)] = db
    plan.bridges[bb][plan.bridges[bb].index(db)] = da


def _start_controller(st: dict, sdir: Path) -> int:
    cfg = {"fabric": st["fabric"], "status_file": str(sdir / "status.json"), "state_dir": str(sdir),
           "datapath": st["config"], "pfc": st["pfc"]}
    (sdir / "controller.json").write_text(json.dumps(cfg))
    log = open(sdir / "controller.log", "ab")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller", "--port", str(st["controller_port"]), "--config",
         str(sdir / "controller.json")],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=repo, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    return proc.pid


def _stop_pfc(st: dict) -> None:
    """Stop the PFC helper (it resumes every queue it holds on the way out)
    and unpin the queue-watch maps."""
    if not st.get("pfc", {}).get("enabled"):
        return
    pid = ((controller_status(st) or {}).get("pfc") or {}).get("pid")
    if pid:
        _stop_controller(pid)
    from controller.pfc import attach

    attach.remove_pins()


def _stop_controller(pid: int | None) -> None:
    if not _alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _prepare_ovs_send_buffer(st: dict) -> str | None:
    """OVS sends on every system port through one AF_PACKET socket with the
    default send buffer, which silently drops once ~90 packets sit in the
    switch queues. The socket is made on the first send, with wmem_default:
    raise it until then (returns the value to restore)."""
    current = build.ovs_send_buffer_bytes()
    if current is not None and current >= build.OVS_SNDBUF_BYTES // 2:
        return None
    if current is not None:
        others = [b for b in build.run(["ovs-vsctl", "list-br"]).split()]
        if others:
            st["warnings"].append("ovs-vswitchd already has a small AF_PACKET send buffer and other bridges "
                                  f"({', '.join(others[:3])}); not restarting it")
            return None
        subprocess.run(["ovs-appctl", "-t", "ovs-vswitchd", "exit"], capture_output=True, timeout=30)
    old = Path("/proc/sys/net/core/wmem_default").read_text().strip()
    build._write("/proc/sys/net/core/wmem_default", build.OVS_SNDBUF_BYTES)
    if current is not None:
        build.run(["/usr/share/openvswitch/scripts/ovs-ctl", "--no-ovsdb-server", "start", "--system-id=random"])
    return old


def _set_ovs_tuning() -> dict:
    """Let the PMD sleep when idle (it shares 2 cores with the hosts' TCP)."""
    out = subprocess.run(["ovs-vsctl", "--if-exists", "get", "open_vswitch", ".", "other_config:pmd-maxsleep"],
                         capture_output=True, text=True).stdout.strip().strip('"')
    subprocess.run(["ovs-vsctl", "set", "open_vswitch", ".", "other_config:pmd-maxsleep=500"], capture_output=True)
    return {"pmd-maxsleep": out or None}


def _restore_ovs_tuning(saved: dict) -> None:
    if not saved:
        return
    value = saved.get("pmd-maxsleep")
    if value:
        subprocess.run(["ovs-vsctl", "set", "open_vswitch", ".", f"other_config:pmd-maxsleep={value}"],
                       capture_output=True)
    else:
        subprocess.run(["ovs-vsctl", "remove", "open_vswitch", ".", "other_config", "pmd-maxsleep"],
                       capture_output=True)


def controller_status(st: dict) -> dict | None:
    try:
        return json.loads((Path(st["state_dir"]) / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _wait_ready(st: dict, fabric: Fabric, log) -> dict:
    deadline = time.monotonic() + READY_TIMEOUT_S
    status = None
    while time.monotonic() < deadline:
        if not _alive(st["controller_pid"]):
            tail = (Path(st["state_dir"]) / "controller.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise EnvironmentProblem(f"the controller exited during bring-up: {' | '.join(tail)}")
        status = controller_status(st)
        if status:
            switches = status["switches"].values()
            mismatch = [f"{n}: {s['mismatch']}" for n, s in status["switches"].items() if s["mismatch"]]
            if mismatch:
                raise EnvironmentProblem(f"flow read-back differs from the plan: {mismatch[0]}")
            cabling = status["cabling"]
            pfc = status.get("pfc") or {}
            if pfc.get("error"):
                raise EnvironmentProblem(f"the PFC helper failed: {pfc['error']}")
            pfc_ready = not st["pfc"].get("enabled") or pfc.get("ready")
            if all(s["verified"] for s in switches) and cabling["probes_sent"]:
                if not cabling["wrong"] and pfc_ready:
                    return status
                found = len([w for w in cabling["wrong"].values() if w["found"]])
                if cabling["wrong"] and cabling["confirmed"] + found == cabling["expected"]:
                    port, w = next(iter(cabling["wrong"].items()))
                    raise EnvironmentProblem(f"cabling differs from the plan: {port} should reach {w['expected']} "
                                             f"but reaches {w['found']} ({len(cabling['wrong'])} cables wrong)")
        time.sleep(0.1)
    if status is None:
        raise EnvironmentProblem(f"the controller wrote no status within {READY_TIMEOUT_S} s")
    if st["pfc"].get("enabled") and not (status.get("pfc") or {}).get("ready"):
        raise EnvironmentProblem(f"the PFC helper was not ready within {READY_TIMEOUT_S} s "
                                 f"(see {Path(st['state_dir']) / 'pfcd.log'})")
    waiting = [n for n, s in status["switches"].items() if not s["verified"]]
    if waiting:
        raise EnvironmentProblem(f"switches not programmed within {READY_TIMEOUT_S} s: {', '.join(waiting[:5])}")
    port, w = next(iter(status["cabling"]["wrong"].items()))
    raise EnvironmentProblem(f"cabling differs from the plan: {port} should reach {w['expected']} "
                             f"but reaches {w['found'] or 'nothing'}")


def _first_send(plan: DatapathPlan) -> None:
    """One UDP packet across the fabric: makes OVS open its AF_PACKET socket."""
    host = plan.hosts[0]
    with netns.inside(host.netns):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"hello", (host.neighbours[0][0], 9))
    time.sleep(0.2)


# --------------------------------------------------------------------- down
def down() -> dict:
    require_root()
    st = require_state()
    t0 = time.monotonic()
    _stop_pfc(st)
    _stop_controller(st.get("controller_pid"))
    timings = build.teardown(build.Created.from_dict(st["created"]))
    _restore_ovs_tuning(st.get("ovs_restore", {}))
    state_file().unlink(missing_ok=True)
    timings["down_s"] = round(time.monotonic() - t0, 3)
    return timings


# --------------------------------------------------------------------- exec
def exec_argv(host: str, argv: list[str]) -> list[str]:
    st = require_state()
    fabric = fabric_of_state(st)
    if not host.startswith("gpu") or not host[3:].isdigit() or not 1 <= int(host[3:]) <= fabric.n_gpus:
        raise TestbedError(f"host {host!r} is not in this fabric: expected gpu1 .. gpu{fabric.n_gpus}")
    if not argv:
        raise TestbedError("exec needs a command after '--', e.g. testbed exec gpu3 -- ping -c1 10.2.0.17")
    return ["ip", "netns", "exec", f"{NETNS_PREFIX}{host}", *argv]


# ------------------------------------------------------------------- status
def total_drops(st: dict) -> int:
    """Packets every queue of the fabric has dropped so far."""
    return sum(q.get("drops", 0) for q in read_queues(st))


def read_queues(st: dict) -> list[dict]:
    """Backlog, drops and sent counters of every queue, through netlink. A row whose device or bfifo
    is gone (fabric going down) has no counters: callers must not read a missing field as 0.

    One qdisc dump per namespace: pyroute2's ``get_qdiscs(index=...)`` dumps every qdisc of the
    namespace and filters in Python, so a dump per queue cost 192 dumps of ~600 qdiscs on ROFT n=32
    (12 s a sample idle, 25-28 s under load), and the replay's queue sampler outlived its stop()
    into the teardown, where devices already deleted read as missing counters."""
    from pyroute2 import IPRoute

    by_ns: dict[str | None, list[dict]] = {}
    for q in st["queues"]:
        by_ns.setdefault(q["netns"], []).append(q)
    out = []
    for ns, queues in by_ns.items():
        ctx = netns.inside(ns) if ns else contextlib.nullcontext()
        with ctx:
            ipr = IPRoute()
            try:
                index = {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}
                qdiscs: dict[int, list] = {}
                for qd in ipr.get_qdiscs():
                    qdiscs.setdefault(qd["index"], []).append(qd)
                for q in queues:
                    idx = index.get(q["dev"])
                    row = {"queue": q["qid"], "towards": q["towards"], "kind": q["kind"]}
                    for qd in qdiscs.get(idx, []) if idx is not None else []:
                        if qd.get_attr("TCA_KIND") == "bfifo":
                            s2 = qd.get_attr("TCA_STATS2")
                            qs, basic = s2.get_attr("TCA_STATS_QUEUE"), s2.get_attr("TCA_STATS_BASIC")
                            row.update(backlog=qs["backlog"], qlen=qs["qlen"], drops=qs["drops"],
                                       packets=basic["packets"], bytes=basic["bytes"])
                    out.append(row)
            finally:
                ipr.close()
    return out


def pfc_state(st: dict) -> dict:
    """The PFC helper's live view (its status file, rewritten once a second)."""
    if not st.get("pfc", {}).get("enabled"):
        return {"enabled": False}
    try:
        doc = json.loads((Path(st["state_dir"]) / "pfc_status.json").read_text())
    except (OSError, ValueError):
        return {"enabled": True, "alive": False}
    return {"enabled": True, "alive": _alive(doc.get("pid")), "age_s": round(time.time() - doc.get("updated", 0), 1),
            **{k: doc.get(k) for k in ("pauses", "resumes", "paused_now", "over_now", "pause_latency_ms",
                                       "resume_latency_ms", "loop_gaps")}}


def status() -> dict:
    st = require_state()
    ctrl = controller_status(st) or {}
    pfc = pfc_state(st)
    queues = read_queues(st)
    if pfc.get("enabled"):
        paused, over = set(pfc.get("paused_now") or []), set(pfc.get("over_now") or [])
        for q in queues:
            q["paused"], q["over_xoff"] = q["queue"] in paused, q["queue"] in over
    return {
        "fabric": st["fabric"],
        "config": st["config"],
        "controller": {"pid": st["controller_pid"], "alive": _alive(st["controller_pid"]),
                       "switches_verified": sum(1 for s in ctrl.get("switches", {}).values() if s["verified"]),
                       "switches": len(ctrl.get("switches", {})), "miss_packets": ctrl.get("miss_packets")},
        "timings": st["timings"],
        "warnings": st["warnings"],
        "queues": queues,
        "pfc": pfc,
    }


# -------------------------------------------------------------------- clean
def clean() -> list[str]:
    """Remove whatever this project left behind, and nothing else: bridges and
    QoS rows marked with our external id, namespaces named tb-*, devices with
    our ifalias, controller processes started from our state directory."""
    require_root()
    removed: list[str] = []
    st = load_state()
    if st:
        _stop_pfc(st)
        _stop_controller(st.get("controller_pid"))
        _restore_ovs_tuning(st.get("ovs_restore", {}))
    marker = str(state_dir() / "controller.json")
    pfc_marker = str(state_dir() / "pfc_policy.json")
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"controller" in cmdline and marker.encode() in cmdline:
                _stop_controller(int(entry))
                removed.append(f"controller process {entry}")
            elif b"controller.pfc.pfcd" in cmdline and pfc_marker.encode() in cmdline:
                _stop_controller(int(entry))
                removed.append(f"PFC helper process {entry}")
            elif cmdline[1:3] == [b"-m", b"traffic.launcher"]:
                _stop_controller(int(entry))
                removed.append(f"agent launcher process {entry}")
            elif cmdline[1:3] == [b"-m", b"traffic.coordinator"]:
                _stop_controller(int(entry))
                removed.append(f"serving coordinator process {entry}")
    for sock_dir in Path(tempfile.gettempdir()).glob("tb-serving-*"):  # the live driver's control sockets
        shutil.rmtree(sock_dir, ignore_errors=True)
        removed.append(f"control socket folder {sock_dir}")
    if subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True).returncode == 0:
        out = build.run(["ovs-vsctl", "--format=json", "--columns=name,external_ids", "list", "bridge"])
        ours = [row[0] for row in json.loads(out)["data"] if [ALIAS, "1"] in row[1][1]]
        if ours:
            cmd = ["ovs-vsctl", "--timeout=60"]
            for br in ours:
                cmd += ["--", "--if-exists", "del-br", br]
            build.run(cmd)
            removed += [f"OVS bridge {b}" for b in ours]
        out = build.run(["ovs-vsctl", "--format=json", "--columns=_uuid,external_ids", "list", "qos"])
        for uuid, ids in json.loads(out)["data"]:
            if [ALIAS, "1"] in ids[1]:
                subprocess.run(["ovs-vsctl", "--if-exists", "destroy", "qos", uuid[1]], capture_output=True)
                removed.append(f"OVS QoS {uuid[1][:8]}")
    spaces = [n for n in (os.listdir(netns.NETNS_DIR) if os.path.isdir(netns.NETNS_DIR) else [])
              if n.startswith(NETNS_PREFIX + "gpu")]
    for pid in netns.pids_in(spaces):
        try:
            os.kill(pid, signal.SIGKILL)
            removed.append(f"process {pid} in a testbed namespace")
        except OSError:
            pass
    if spaces:
        subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns delete {n}\n" for n in spaces),
                       text=True, capture_output=True)
        removed += [f"netns {n}" for n in spaces]
    from pyroute2 import IPRoute

    ipr = IPRoute()
    try:
        for link in ipr.get_links():
            if link.get_attr("IFLA_IFALIAS") == ALIAS:
                try:
                    ipr.link("del", index=link["index"])
                    removed.append(f"link {link.get_attr('IFLA_IFNAME')}")
                except Exception:
                    pass
    finally:
        ipr.close()
    from controller.pfc import attach

    removed += [f"pinned BPF map {p}" for p in attach.remove_pins()]
    state_file().unlink(missing_ok=True)
    return removed
