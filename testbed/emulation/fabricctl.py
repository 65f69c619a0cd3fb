"""The containerlab-like verbs on one fabric at a time: up, down, exec, status, clean.

State of the running fabric (what was built, controller PID and port,
timings: ``FabricState``) is in ``$TESTBED_STATE_DIR`` (default /run/zcube-testbed),
together with the controller's config, log and status file. ``up`` either returns with
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

from pfc import files as pfc_files
from testbed.emulation import build, inventory, netns
from testbed.emulation.datapath import ALIAS, NETNS_PREFIX, DatapathConfig, DatapathPlan, plan_datapath
from testbed.emulation.state import Created, FabricState
from testbed.errors import EnvironmentProblem, TestbedError
from testbed.fabric import Fabric, build_fabric
from testbed.paths import REPO, module_env

READY_TIMEOUT_S = 60
FAULT_LOG, FAULTS_IN_FORCE = "faults.jsonl", "faults.json"  # testbed.emulation.faults writes them
FAILOVER_MODES = ("fast", "controller")
# files of an earlier fabric that a new one would otherwise append to or be misread by
_LEFTOVER_FILES = ("status.json", "controller.log", pfc_files.LOG_FILE, pfc_files.LATENCY_FILE, pfc_files.GAPS_FILE,
                   pfc_files.STATUS_FILE, "pfcd.log", FAULTS_IN_FORCE, FAULT_LOG)


def state_dir() -> Path:
    """Where the running fabric's files live (one fabric per machine)."""
    return Path(os.environ.get("TESTBED_STATE_DIR", "/run/zcube-testbed"))


def state_file() -> Path:
    """The running fabric's ``FabricState``, as JSON."""
    return state_dir() / "state.json"


def require_root() -> None:
    """Refuse early, in one line, what would fail half way without root."""
    if os.geteuid() != 0:
        raise EnvironmentProblem("this verb needs root (network namespaces, Open vSwitch): run it with sudo")


def require_ovs() -> None:
    """Refuse early, in one line, what would fail half way without Open vSwitch."""
    proc = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True)
    if proc.returncode:
        raise EnvironmentProblem("Open vSwitch is not running: start it with scripts/setup.sh "
                                 "(or /usr/share/openvswitch/scripts/ovs-ctl start)")


def load_state() -> FabricState | None:
    """The running fabric's state (None: no fabric is up)."""
    try:
        return FabricState.from_json(state_file().read_text())
    except FileNotFoundError:
        return None


def require_state() -> FabricState:
    """The running fabric's state, or the one-line error that says how to start one."""
    st = load_state()
    if st is None:
        raise TestbedError("no fabric is up: start one with 'testbed up zcube' or 'testbed up roft'")
    return st


def _alive(pid: int | None) -> bool:
    """Whether ``pid`` runs (a zombie does not: it is only waiting to be reaped)."""
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
    """A TCP port nothing listens on, for the controller."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fabric_of_state(st: FabricState) -> Fabric:
    """The model of the running fabric."""
    return st.model()


# ----------------------------------------------------------------------- up
def up(fabric_args: dict, config: DatapathConfig, miswire: tuple[str, str] | None = None,
       log=print, pfc=None, failover: str = "fast") -> FabricState:
    """Build, program and verify a fabric; return its state. Raises on failure
    after removing everything it made. ``pfc``: a PfcConfig (None or disabled:
    lossy queues, no pause). ``failover``: "fast" (group buckets watch their ports) or
    "controller" (only the controller's repair moves traffic off a dead cable)."""
    if failover not in FAILOVER_MODES:
        raise TestbedError(f"failover {failover!r}: expected one of {', '.join(FAILOVER_MODES)}")
    fabric = build_fabric(**fabric_args)  # bad parameters fail before anything is touched
    plan = plan_datapath(fabric, config)
    pfc, limits = _pfc_queue_limits(fabric, config, pfc)  # bad thresholds fail here
    if miswire:
        _miswire(plan, *miswire)
    require_root()
    require_ovs()
    _refuse_second_fabric()
    t0 = time.monotonic()
    sdir = _fresh_state_dir()
    st = FabricState(fabric={"kind": fabric.kind, **_fabric_kwargs(fabric)}, config=asdict(config),
                     created=Created(), controller_port=_free_port(), queues=[asdict(q) for q in plan.queues],
                     state_dir=str(sdir), pfc=asdict(pfc) if pfc is not None else {"enabled": False},
                     queue_limits=limits, failover=None if failover == "fast" else failover)
    _save(st)  # from here on, 'clean' can find what exists even if this process dies
    try:
        _bring_up(st, fabric, plan, t0, log)
    except BaseException:
        _undo_up(st, log)
        raise
    return st


def _pfc_queue_limits(fabric: Fabric, config: DatapathConfig, pfc) -> tuple:
    """The PFC settings with the links' burst in the headroom, and the switch queues' byte limits
    they give ({} without PFC): checked before anything is touched."""
    if pfc is None or not pfc.enabled:
        return pfc, {}
    from controller import pfc_launch
    from pfc import policy as pfc_policy

    pfc = pfc_launch.with_burst_headroom(pfc, config.rate_bps, config.mtu, config.burst_bytes)
    resolved = pfc_policy.resolve(pfc, config.rate_bps, config.mtu, config.buffer_bytes)
    return pfc, {q: th["limit"] for q, th in pfc_policy.thresholds(fabric, resolved).items()}


def _refuse_second_fabric() -> None:
    """One fabric per machine: a running one needs 'down', a dead one's leftovers 'clean'."""
    existing = load_state()
    if existing is None:
        return
    if _alive(existing.controller_pid) or any(netns.exists(n) for n in existing.created.netns):
        raise TestbedError(f"a fabric is already up ({existing.fabric['kind']}, "
                           f"{existing.fabric['gpus']} GPUs): run 'testbed down' first")
    raise TestbedError("a stale fabric state was left behind: run 'testbed clean' first")


def _fresh_state_dir() -> Path:
    """The state directory, without an earlier fabric's logs and status files."""
    sdir = state_dir()
    sdir.mkdir(parents=True, exist_ok=True)
    for leftover in _LEFTOVER_FILES:
        (sdir / leftover).unlink(missing_ok=True)
    return sdir


def _bring_up(st: FabricState, fabric: Fabric, plan: DatapathPlan, t0: float, log) -> None:
    """Start the controller, build the datapath, wait until the controller verified it; the
    state file is saved after each step that makes something, for 'clean'."""
    st.controller_pid = _start_controller(st)
    _save(st)
    restore_wmem = _prepare_ovs_send_buffer(st)
    st.ovs_restore = _set_ovs_tuning()
    bpf_obj = _prepare_queue_watch(st.directory) if st.pfc_enabled else None
    try:
        build.build(plan, st.controller_port, st.created, st.timings, st.queue_limits, bpf_obj)
    finally:
        _save(st)
    build.wait_ovs_ports(plan)
    status = _wait_ready(st, fabric, log)
    st.timings["controller_ready_s"] = round(time.monotonic() - t0, 3)
    _first_send(plan)
    _check_send_buffer(st, restore_wmem)
    st.controller_status = {"miss_packets": status["miss_packets"], "cabling": status["cabling"]}
    st.timings["up_s"] = round(time.monotonic() - t0, 3)
    _save(st)


def _prepare_queue_watch(sdir: Path) -> Path:
    """PFC: the BPF filesystem mounted, no maps pinned by an earlier fabric, the programs compiled."""
    from pfc import queue_watch

    queue_watch.ensure_bpffs()
    queue_watch.remove_pins()
    return queue_watch.compile_object(sdir / "queue_watch.o")


def _check_send_buffer(st: FabricState, restore_wmem: str | None) -> None:
    """Give wmem_default back once OVS made its socket, and warn if that socket's buffer is small."""
    if restore_wmem is not None:
        build._write("/proc/sys/net/core/wmem_default", restore_wmem)
    if (build.ovs_send_buffer_bytes() or 0) < build.OVS_SNDBUF_BYTES // 2:
        st.warnings.append("ovs-vswitchd's AF_PACKET send buffer is small: switch queues will drop "
                           "silently inside OVS; restart OVS with no other bridges to fix")


def _undo_up(st: FabricState, log) -> None:
    """A failed or interrupted ``up``: remove what it made (unless asked to keep it for inspection)."""
    if os.environ.get("TESTBED_KEEP_ON_FAILURE"):
        log("up failed: TESTBED_KEEP_ON_FAILURE is set, leaving it for inspection ('testbed clean' removes it)")
        return
    log("up failed: removing what was built")
    _stop_pfc(st)
    _stop_process(st.controller_pid)
    build.teardown(st.created)
    _restore_ovs_tuning(st.ovs_restore or {})
    state_file().unlink(missing_ok=True)


def _fabric_kwargs(f: Fabric) -> dict:
    """The ``build_fabric`` keyword arguments that rebuild ``f`` from the state file."""
    p = dict(f.params)
    out = {"gpus": p["gpus"]}
    if f.kind == "zcube":
        out.update(gpus_per_switch=p["gpus_per_switch"], cables=p["cables"])
    else:
        out.update(gpus_per_server=p["gpus_per_server"], radix=p["radix"])
    return out


def _save(st: FabricState) -> None:
    """Atomically: a reader (or 'clean' after a crash) never sees half a state file."""
    tmp = state_file().with_suffix(".tmp")
    tmp.write_text(st.to_json())
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


def _start_controller(st: FabricState) -> int:
    """Start the controller in its own session (Ctrl-C in the terminal is ``up``'s to handle)."""
    sdir = st.directory
    cfg = {"fabric": st.fabric, "status_file": str(sdir / "status.json"), "state_dir": str(sdir),
           "datapath": st.config, "pfc": st.pfc, "failover": st.failover or "fast"}
    (sdir / "controller.json").write_text(json.dumps(cfg))
    log = open(sdir / "controller.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller", "--port", str(st.controller_port), "--config",
         str(sdir / "controller.json")],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, start_new_session=True,
        env=module_env(),
    )
    return proc.pid


def controller_alive(st: FabricState) -> bool:
    """Whether the fabric's controller process runs."""
    return _alive(st.controller_pid)


def stop_controller(st: FabricState) -> None:
    """Stop only the controller: the switches keep forwarding on the rules they hold (fail_mode secure) and
    the pause daemon keeps running."""
    _stop_process(st.controller_pid)
    st.controller_pid = None
    _save(st)


def start_controller(st: FabricState, log=print) -> dict:
    """Start a controller on the running fabric and wait until it verified every switch; return its status.
    It reads each switch back before writing, so a healthy fabric gets no message."""
    if _alive(st.controller_pid):
        raise TestbedError(f"the controller already runs (pid {st.controller_pid})")
    (st.directory / "status.json").unlink(missing_ok=True)  # the stopped controller's last word
    st.controller_pid = _start_controller(st)
    _save(st)
    return _wait_ready(st, st.model(), log)


def _stop_pfc(st: FabricState) -> None:
    """Stop the pause daemon (it resumes every queue it holds on the way out)
    and unpin the queue-watch maps."""
    if not st.pfc_enabled:
        return
    pid = ((controller_status(st) or {}).get("pfc") or {}).get("pid")
    if pid:
        _stop_process(pid)
    from pfc import queue_watch

    queue_watch.remove_pins()


def _stop_process(pid: int | None) -> None:
    """SIGTERM, so the process cleans up after itself (the pause daemon resumes its queues);
    SIGKILL if it has not gone within 2.5 s."""
    if not _alive(pid):
        return
    try:  # the process may exit between the check and the signal: that is success
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not _alive(pid):
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _prepare_ovs_send_buffer(st: FabricState) -> str | None:
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
            st.warnings.append("ovs-vswitchd already has a small AF_PACKET send buffer and other bridges "
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
    """Give OVS back the setting ``_set_ovs_tuning`` changed (it is machine-wide, not ours)."""
    if not saved:
        return
    value = saved.get("pmd-maxsleep")
    if value:
        subprocess.run(["ovs-vsctl", "set", "open_vswitch", ".", f"other_config:pmd-maxsleep={value}"],
                       capture_output=True)
    else:
        subprocess.run(["ovs-vsctl", "remove", "open_vswitch", ".", "other_config", "pmd-maxsleep"],
                       capture_output=True)


def controller_status(st: FabricState) -> dict | None:
    """The controller's status file (None: not written yet, or half written)."""
    try:
        return json.loads((st.directory / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _wait_ready(st: FabricState, fabric: Fabric, log) -> dict:
    """Until the controller verified every switch's flows and every cable (and PFC's daemon is
    ready); fails as soon as the status shows a difference from the plan that will not go away."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    status = None
    while time.monotonic() < deadline:
        if not _alive(st.controller_pid):
            tail = (st.directory / "controller.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise EnvironmentProblem(f"the controller exited during bring-up: {' | '.join(tail)}")
        status = controller_status(st)
        if status and _ready(st, status):
            return status
        time.sleep(0.1)
    raise _not_ready(st, status)


def _ready(st: FabricState, status: dict) -> bool:
    """Whether one controller status says the fabric is ready; raises on a final difference
    (flows read back wrong, the pause daemon failed, every cable probed and some wrong)."""
    mismatch = [f"{n}: {s['mismatch']}" for n, s in status["switches"].items() if s["mismatch"]]
    if mismatch:
        raise EnvironmentProblem(f"flow read-back differs from the plan: {mismatch[0]}")
    cabling = status["cabling"]
    pfc = status.get("pfc") or {}
    if pfc.get("error"):
        raise EnvironmentProblem(f"the PFC helper failed: {pfc['error']}")
    pfc_ready = not st.pfc_enabled or pfc.get("ready")
    if not (all(s["verified"] for s in status["switches"].values()) and cabling["probes_sent"]):
        return False
    if not cabling["wrong"] and pfc_ready:
        return True
    found = len([w for w in cabling["wrong"].values() if w["found"]])
    if cabling["wrong"] and cabling["confirmed"] + found == cabling["expected"]:
        port, w = next(iter(cabling["wrong"].items()))
        raise EnvironmentProblem(f"cabling differs from the plan: {port} should reach {w['expected']} "
                                 f"but reaches {w['found']} ({len(cabling['wrong'])} cables wrong)")
    return False


def _not_ready(st: FabricState, status: dict | None) -> EnvironmentProblem:
    """What kept the fabric from being ready within READY_TIMEOUT_S, from the last status."""
    if status is None:
        return EnvironmentProblem(f"the controller wrote no status within {READY_TIMEOUT_S} s")
    if st.pfc_enabled and not (status.get("pfc") or {}).get("ready"):
        return EnvironmentProblem(f"the PFC helper was not ready within {READY_TIMEOUT_S} s "
                                  f"(see {st.directory / 'pfcd.log'})")
    waiting = [n for n, s in status["switches"].items() if not s["verified"]]
    if waiting:
        return EnvironmentProblem(f"switches not programmed within {READY_TIMEOUT_S} s: {', '.join(waiting[:5])}")
    port, w = next(iter(status["cabling"]["wrong"].items()))
    return EnvironmentProblem(f"cabling differs from the plan: {port} should reach {w['expected']} "
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
    """Stop the fabric's processes and remove exactly what ``up`` recorded; return the timings."""
    require_root()
    st = require_state()
    t0 = time.monotonic()
    failed = []
    for step in (lambda: _stop_pfc(st), lambda: _stop_process(st.controller_pid)):
        try:  # a step that fails must not leave the rest of the fabric standing
            step()
        except Exception as exc:  # noqa: BLE001 - reported below, after the teardown
            failed.append(f"{type(exc).__name__}: {exc}")
    timings = build.teardown(st.created)
    _restore_ovs_tuning(st.ovs_restore or {})
    state_file().unlink(missing_ok=True)
    if failed:
        raise EnvironmentProblem(f"the fabric is down, but stopping its processes failed: {failed[0]}; "
                                 "'testbed clean' sweeps what is left")
    timings["down_s"] = round(time.monotonic() - t0, 3)
    return timings


# --------------------------------------------------------------------- exec
def exec_argv(host: str, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` inside GPU ``host``'s namespace."""
    st = require_state()
    fabric = fabric_of_state(st)
    if not host.startswith("gpu") or not host[3:].isdigit() or not 1 <= int(host[3:]) <= fabric.n_gpus:
        raise TestbedError(f"host {host!r} is not in this fabric: expected gpu1 .. gpu{fabric.n_gpus}")
    if not argv:
        raise TestbedError("exec needs a command after '--', e.g. testbed exec gpu3 -- ping -c1 10.2.0.17")
    return ["ip", "netns", "exec", f"{NETNS_PREFIX}{host}", *argv]


# ------------------------------------------------------------------- status
def total_drops(st: FabricState) -> int:
    """Packets every queue of the fabric has dropped so far."""
    return sum(q.get("drops", 0) for q in read_queues(st))


def read_queues(st: FabricState) -> list[dict]:
    """Backlog, drops and sent counters of every queue, through netlink. A row whose device or bfifo
    is gone (fabric going down) has no counters: callers must not read a missing field as 0.

    One qdisc dump per namespace, not per queue: pyroute2's ``get_qdiscs(index=...)`` dumps every
    qdisc of the namespace and filters in Python, so a dump per queue grows with the square of the
    fabric (seconds a sample on ROFT n=32), long enough for a sampler to outlive the fabric."""
    from pyroute2 import IPRoute

    by_ns: dict[str | None, list[dict]] = {}
    for q in st.queues:
        by_ns.setdefault(q["netns"], []).append(q)
    out = []
    for ns, queues in by_ns.items():
        ctx = netns.inside(ns) if ns else contextlib.nullcontext()
        with ctx:
            ipr = IPRoute()
            try:
                out += _queue_rows(ipr, queues)
            finally:
                ipr.close()
    return out


def _queue_rows(ipr, queues: list[dict]) -> list[dict]:
    """The rows of one namespace's queues, from one link and one qdisc dump."""
    index = {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}
    qdiscs: dict[int, list] = {}
    for qd in ipr.get_qdiscs():
        qdiscs.setdefault(qd["index"], []).append(qd)
    rows = []
    for q in queues:
        idx = index.get(q["dev"])
        row = {"queue": q["qid"], "towards": q["towards"], "kind": q["kind"]}
        for qd in qdiscs.get(idx, []) if idx is not None else []:
            if qd.get_attr("TCA_KIND") == "bfifo":
                s2 = qd.get_attr("TCA_STATS2")
                qs, basic = s2.get_attr("TCA_STATS_QUEUE"), s2.get_attr("TCA_STATS_BASIC")
                row.update(backlog=qs["backlog"], qlen=qs["qlen"], drops=qs["drops"],
                           packets=basic["packets"], bytes=basic["bytes"])
        rows.append(row)
    return rows


def pfc_state(st: FabricState) -> dict:
    """The pause daemon's live view (its status file, rewritten once a second)."""
    if not st.pfc_enabled:
        return {"enabled": False}
    try:
        doc = json.loads((st.directory / pfc_files.STATUS_FILE).read_text())
    except (OSError, ValueError):
        return {"enabled": True, "alive": False}
    return {"enabled": True, "alive": _alive(doc.get("pid")), "age_s": round(time.time() - doc.get("updated", 0), 1),
            **{k: doc.get(k) for k in ("pauses", "resumes", "paused_now", "over_now", "pause_latency_ms",
                                       "resume_latency_ms", "loop_gaps")}}


def status() -> dict:
    """``testbed status``: the fabric, its controller, every queue and PFC's pauses."""
    st = require_state()
    ctrl = controller_status(st) or {}
    pfc = pfc_state(st)
    queues = read_queues(st)
    if pfc.get("enabled"):
        paused, over = set(pfc.get("paused_now") or []), set(pfc.get("over_now") or [])
        for q in queues:
            q["paused"], q["over_xoff"] = q["queue"] in paused, q["queue"] in over
    return {
        "fabric": st.fabric,
        "config": st.config,
        "controller": {"pid": st.controller_pid, "alive": _alive(st.controller_pid),
                       "switches_verified": sum(1 for s in ctrl.get("switches", {}).values() if s["verified"]),
                       "switches": len(ctrl.get("switches", {})), "miss_packets": ctrl.get("miss_packets"),
                       "ports_down": ctrl.get("ports_down", [])},
        "faults": faults_in_force(st),
        "timings": st.timings,
        "warnings": st.warnings,
        "queues": queues,
        "pfc": pfc,
    }


def faults_in_force(st: FabricState) -> dict:
    """``testbed fault`` targets down now -> since when."""
    try:
        return json.loads((st.directory / FAULTS_IN_FORCE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


# -------------------------------------------------------------------- clean
def clean() -> list[str]:
    """Remove whatever this project left behind, and nothing else: bridges and
    QoS rows marked with our external id, namespaces named tb-*, devices with
    our ifalias, controller processes started from our state directory."""
    require_root()
    st = load_state()
    if st is not None:
        _stop_pfc(st)
        _stop_process(st.controller_pid)
        _restore_ovs_tuning(st.ovs_restore or {})
    removed = _stop_our_processes()
    removed += _remove_socket_folders()
    if subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True).returncode == 0:
        removed += _remove_ovs_rows()
    removed += _remove_namespaces()
    removed += _remove_links()
    from pfc import queue_watch

    removed += [f"pinned BPF map {p}" for p in queue_watch.remove_pins()]
    state_file().unlink(missing_ok=True)
    return removed


def _our_process(cmdline: list[bytes], sdir: Path) -> str | None:
    """What a process of ours is, from its command line (None: not ours; the table is the inventory's).
    The controller and the pause daemon count only when started on the files of our state directory
    ``sdir``."""
    what = inventory.OUR_PROCESSES.get(tuple(cmdline[1:3]))
    own = STATE_FILE_OF.get(what)
    if own is not None and str(sdir / own).encode() not in cmdline:
        return None
    return what


STATE_FILE_OF = {"controller": "controller.json", "PFC helper": pfc_files.POLICY_FILE}


def _stop_our_processes() -> list[str]:
    """Stop the controllers, pause daemons, agent launchers and coordinators an earlier fabric left."""
    removed = []
    sdir = state_dir()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            what = _our_process(cmdline, sdir)
            if what:
                _stop_process(int(entry))
                removed.append(f"{what} process {entry}")
    return removed


def _remove_socket_folders() -> list[str]:
    """The live driver's control socket folders."""
    removed = []
    for sock_dir in Path(tempfile.gettempdir()).glob("tb-serving-*"):
        shutil.rmtree(sock_dir, ignore_errors=True)
        removed.append(f"control socket folder {sock_dir}")
    return removed


def _remove_ovs_rows() -> list[str]:
    """OVS bridges (in one transaction) and QoS rows that carry our external id."""
    removed = []
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
    return removed


def _remove_namespaces() -> list[str]:
    """Our GPU namespaces, after killing what runs inside (a process keeps a namespace alive)."""
    removed = []
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
    return removed


def _remove_links() -> list[str]:
    """Root-namespace devices with our ifalias (a veth's twin may go with it first)."""
    from pyroute2 import IPRoute

    removed = []
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
    return removed
