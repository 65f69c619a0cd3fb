"""The containerlab-like verbs on one fabric at a time: up, down, exec, status (clean: ``sweep``).

State of the running fabric (what was built, controller PID and port,
timings: ``FabricState``) is in ``$TESTBED_STATE_DIR`` (default /run/zcube-testbed),
together with the controller's config, log and status file. As root that directory must be
root's and writable by no one else (``owned.require_private_dir``), and files in it are written
without following links. ``up`` either returns with a ready fabric or removes everything it made,
also on Ctrl-C or a closed terminal.

Root acts only on what is provably ours (``common.owned``, ``inventory``): a process is signalled
only if its start time and exact command line are the ones recorded, and it is ours (root's, this
checkout's, our arguments); ``down`` removes what the state file lists only where it carries our
marker, as ``clean`` does; ``clean`` works whatever the state file says.

The controller's OpenFlow port is bound once, here, and the listening socket handed to the
controller process (``--listen-fd``): no moment exists when the port is free for someone else to
take before the switches connect. ``$TESTBED_CONTROLLER_PORT`` asks for a fixed port (default: one
the OS gives); a port that is taken fails ``up`` in one line before anything is built.

The controller and the pause daemon hang on a lifeline (``owned.lifeline``) held by the process
that brought the fabric up: if it dies before it is done (``kill -9`` of ``up`` or ``run``) they
stop; ``testbed up`` releases it once the fabric is ready, since leaving the fabric running is
what it is for.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from common import owned
from common.errors import EnvironmentProblem, TestbedError
from common.paths import REPO, module_env
from fabrics import Fabric, build_fabric
from fabrics.datapath import ALIAS, NETNS_PREFIX, DatapathConfig, DatapathPlan, plan_datapath
from pfc import files as pfc_files
from testbed.emulation import build, inventory, netns
from testbed.emulation import state as _state
from testbed.emulation.state import Created, FabricState, StateFileError

READY_TIMEOUT_S = 60
FAULT_LOG, FAULTS_IN_FORCE = "faults.jsonl", "faults.json"  # testbed.emulation.faults writes them
FAILOVER_MODES = ("fast", "controller")
# files of an earlier fabric that a new one would otherwise append to or be misread by
_LEFTOVER_FILES = ("status.json", "controller.log", pfc_files.LOG_FILE, pfc_files.LATENCY_FILE, pfc_files.GAPS_FILE,
                   pfc_files.STATUS_FILE, "pfcd.log", FAULTS_IN_FORCE, FAULT_LOG)


def state_dir() -> Path:
    """Where the running fabric's files live (one fabric per machine)."""
    return _state.state_dir()


def state_file() -> Path:
    """The running fabric's ``FabricState``, as JSON."""
    return _state.state_file()


def require_state_dir() -> Path:
    """The state directory; as root made if missing and refused in one line unless only root can write to it
    (and to every directory above it that is not sticky)."""
    what = "TESTBED_STATE_DIR" if "TESTBED_STATE_DIR" in os.environ else "state directory"
    return owned.require_private_dir(state_dir(), what)


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
    """The running fabric's state (None: no fabric is up). A state directory others can write to, or a state
    file that is not a state, is one line naming the file and the reason (never its content)."""
    require_state_dir()
    path = state_file()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EnvironmentProblem(f"{path}: cannot read the fabric state ({exc.strerror or exc}); "
                                 "'testbed clean' removes it") from None
    try:
        with os.fdopen(fd, "rb") as fh:
            return FabricState.from_json(fh.read().decode("utf-8"))
    except (StateFileError, UnicodeDecodeError) as exc:
        why = exc.reason if isinstance(exc, UnicodeDecodeError) else exc
        raise TestbedError(f"{path}: not a fabric state ({why}); 'testbed clean' removes what is ours "
                           "whatever the file says") from None


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


CONTROLLER_HOST = "127.0.0.1"


def requested_port() -> int:
    """$TESTBED_CONTROLLER_PORT (0, the default: a port the OS gives when ``up`` binds)."""
    raw = os.environ.get("TESTBED_CONTROLLER_PORT", "0")
    if not raw.isdigit() or not 0 <= int(raw) <= 65535:
        raise TestbedError(f"TESTBED_CONTROLLER_PORT {raw!r}: expected a TCP port 1..65535 (or 0: any free one)")
    return int(raw)


def listen(port: int, host: str = CONTROLLER_HOST) -> socket.socket:
    """The controller's listening socket on 127.0.0.1:``port`` (0: the OS picks), bound and listening before
    its port is written anywhere; handed to the controller process, which never binds. A port another
    process holds is one line (the switches are never pointed at it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # TIME_WAIT of a stopped controller's connections must not block its successor; a socket listening on
        # the port still does (Linux refuses the bind, or the listen)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise EnvironmentProblem(f"controller port {host}:{port} cannot be bound "
                                 f"({exc.strerror or exc}): another process holds it; free it, or set "
                                 "TESTBED_CONTROLLER_PORT to another port (0: any free one)") from None
    return sock


# The lifeline of the fabric this process brought up: (read end, write end) while it holds it
_LIFELINE: tuple[int, int] | None = None


def _take_lifeline() -> None:
    global _LIFELINE
    _drop_lifeline()
    _LIFELINE = owned.lifeline()


def _drop_lifeline() -> None:
    """Close this process's lifeline without releasing it: the fabric's processes stop when it is cut (used
    once they are stopped anyway)."""
    global _LIFELINE
    if _LIFELINE is not None:
        for fd in _LIFELINE:
            with contextlib.suppress(OSError):
                os.close(fd)
        _LIFELINE = None


def release_fabric() -> None:
    """Let the fabric this process brought up outlive it (``testbed up``): its controller and pause daemon no
    longer stop when this process exits."""
    global _LIFELINE
    if _LIFELINE is not None:
        read_fd, write_fd = _LIFELINE
        _LIFELINE = None
        owned.release(write_fd)
        os.close(read_fd)


def fabric_of_state(st: FabricState) -> Fabric:
    """The model of the running fabric."""
    return st.model()


# ----------------------------------------------------------------------- up
def up(fabric_args: dict, config: DatapathConfig, miswire: tuple[str, str] | None = None,
       log=print, pfc=None, failover: str = "fast", release: bool = False) -> FabricState:
    """Build, program and verify a fabric; return its state. Raises on failure
    after removing everything it made. ``pfc``: a PfcConfig (None or disabled:
    lossy queues, no pause). ``failover``: "fast" (group buckets watch their ports) or
    "controller" (only the controller's repair moves traffic off a dead cable). ``release``: the fabric
    outlives this process (``testbed up``); otherwise its controller and pause daemon stop when this
    process dies before ``down``."""
    if failover not in FAILOVER_MODES:
        raise TestbedError(f"failover {failover!r}: expected one of {', '.join(FAILOVER_MODES)}")
    fabric = build_fabric(**fabric_args)  # bad parameters fail before anything is touched
    plan = plan_datapath(fabric, config)
    pfc, limits = pfc_with_limits(fabric, config, pfc)  # bad thresholds fail here
    if miswire:
        _miswire(plan, *miswire)
    require_root()
    require_ovs()
    port = requested_port()
    _refuse_second_fabric()
    t0 = time.monotonic()
    listener = listen(port)  # before anything is built: a taken port fails here, alone
    try:
        sdir = _fresh_state_dir()
        st = FabricState(fabric={"kind": fabric.kind, **_fabric_kwargs(fabric)}, config=asdict(config),
                         created=Created(), controller_port=listener.getsockname()[1],
                         queues=[asdict(q) for q in plan.queues], state_dir=str(sdir),
                         pfc=asdict(pfc) if pfc is not None else {"enabled": False},
                         queue_limits=limits, failover=None if failover == "fast" else failover)
        _save(st)  # from here on, 'clean' can find what exists even if this process dies
        _take_lifeline()
    except BaseException:
        listener.close()
        raise
    try:
        _bring_up(st, fabric, plan, t0, log, listener)
    except BaseException:
        _undo_up(st, log)
        raise
    if release:
        release_fabric()
    return st


def pfc_with_limits(fabric: Fabric, config: DatapathConfig, pfc) -> tuple:
    """The PFC settings with the links' burst in the headroom, and the switch queues' byte limits
    they give ({} without PFC): checked before anything is touched."""
    if pfc is None or not pfc.enabled:
        return pfc, {}
    from pfc import policy as pfc_policy

    pfc = pfc_policy.with_burst_headroom(pfc, config.rate_bps, config.mtu, config.burst_bytes)
    return pfc, pfc_policy.queue_limits(fabric, config, pfc)


def _refuse_second_fabric() -> None:
    """One fabric per machine: a running one needs 'down', a dead one's leftovers 'clean'."""
    existing = load_state()
    if existing is None:
        return
    if controller_alive(existing) or any(netns.exists(n) for n in existing.created.netns):
        raise TestbedError(f"a fabric is already up ({existing.fabric['kind']}, "
                           f"{existing.fabric['gpus']} GPUs): run 'testbed down' first")
    raise TestbedError("a stale fabric state was left behind: run 'testbed clean' first")


def _fresh_state_dir() -> Path:
    """The state directory (as root: only root's to write), without an earlier fabric's logs and status files."""
    sdir = require_state_dir()
    sdir.mkdir(parents=True, exist_ok=True)
    for leftover in _LEFTOVER_FILES:
        (sdir / leftover).unlink(missing_ok=True)
    return sdir


def _bring_up(st: FabricState, fabric: Fabric, plan: DatapathPlan, t0: float, log,
              listener: socket.socket) -> None:
    """Start the controller on ``listener``, build the datapath, wait until the controller verified it; the
    state file is saved after each step that makes something, for 'clean'."""
    with listener:  # the controller holds its own copy from here on
        _start_controller(st, listener)
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
    _stop_controller_process(st)
    build.teardown(st.created)
    _restore_ovs_tuning(st.ovs_restore or {})
    state_file().unlink(missing_ok=True)
    _drop_lifeline()


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
    owned.write_private(state_file(), st.to_json())


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


def _start_controller(st: FabricState, listener: socket.socket) -> None:
    """Start the controller on ``listener`` (inherited: it never binds) in its own session (Ctrl-C in the
    terminal is ``up``'s to handle), on this process's lifeline if it holds one; record its pid, start time
    and exact command line in ``st``."""
    sdir = state_dir()
    cfg = {"fabric": st.fabric, "status_file": str(sdir / "status.json"), "state_dir": str(sdir),
           "datapath": st.config, "pfc": st.pfc, "failover": st.failover or "fast"}
    owned.write_private(sdir / inventory.CONTROLLER_CONFIG, json.dumps(cfg))
    lifeline = _LIFELINE[0] if _LIFELINE is not None else None
    argv = [sys.executable, *inventory.controller_args(st.controller_port, listener.fileno(), sdir, lifeline)]
    with owned.open_private(sdir / "controller.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                                start_new_session=True, env=module_env(),
                                pass_fds=(listener.fileno(),) + ((lifeline,) if lifeline is not None else ()))
    st.controller_pid, st.controller_start, st.controller_argv = proc.pid, owned.start_time(proc.pid), argv


def _is_our_controller(st: FabricState, info: owned.ProcInfo) -> bool:
    """The recorded controller: ours (root's, this checkout's, our arguments on this state directory) and the
    exact command line recorded (a state file of an earlier version recorded none)."""
    return (inventory.our_process(info, state_dir()) == "controller"
            and (st.controller_argv is None or list(info.argv) == st.controller_argv))


def controller_alive(st: FabricState) -> bool:
    """Whether the fabric's controller process runs (the one recorded: same start time and command line)."""
    info = owned.proc_info(st.controller_pid) if st.controller_pid else None
    return (info is not None and not info.zombie and st.controller_start in (None, info.start)
            and _is_our_controller(st, info))


def _stop_controller_process(st: FabricState) -> str:
    """Stop the recorded controller if it is still that process and ours; "stopped", "gone" or "not ours"."""
    return owned.stop(st.controller_pid, st.controller_start, lambda info: _is_our_controller(st, info))


def stop_controller(st: FabricState) -> None:
    """Stop only the controller: the switches keep forwarding on the rules they hold (fail_mode secure) and
    the pause daemon keeps running."""
    _stop_controller_process(st)
    st.controller_pid = st.controller_start = st.controller_argv = None
    _save(st)


def start_controller(st: FabricState, log=print) -> dict:
    """Start a controller on the running fabric and wait until it verified every switch; return its status.
    It reads each switch back before writing, so a healthy fabric gets no message. The recorded port is
    bound once more, here, and handed over: if another process took it meanwhile, this fails in one line
    and no controller is started."""
    if controller_alive(st):
        raise TestbedError(f"the controller already runs (pid {st.controller_pid})")
    listener = listen(st.controller_port)
    (state_dir() / "status.json").unlink(missing_ok=True)  # the stopped controller's last word
    with listener:
        _start_controller(st, listener)
    _save(st)
    return _wait_ready(st, st.model(), log)


def _stop_pfc(st: FabricState) -> None:
    """Stop the pause daemon (it resumes every queue it holds on the way out), if the controller's status
    names a process that still is it (same start time) and is ours; unpin the queue-watch maps."""
    if not st.pfc_enabled:
        return
    pfc = (controller_status(st) or {}).get("pfc") or {}
    pid, start = pfc.get("pid"), pfc.get("start")
    if isinstance(pid, int) and isinstance(start, (int, type(None))):
        sdir = state_dir()
        owned.stop(pid, start, lambda info: inventory.our_process(info, sdir) == "PFC helper")
    from pfc import queue_watch

    queue_watch.remove_pins()


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


OVS_WAS = f"{ALIAS}-pmd-maxsleep-was"  # external id on OVS's own row: the value a fabric changed, for clean


def _ovs_get(column_key: str) -> str | None:
    """A key of the Open_vSwitch row (None: not set)."""
    out = subprocess.run(["ovs-vsctl", "--timeout=5", "--if-exists", "get", "open_vswitch", ".", column_key],
                         capture_output=True, text=True).stdout.strip()
    return json.loads(out) if out.startswith('"') else (out or None)


def _set_ovs_tuning() -> dict:
    """Let the PMD sleep when idle (it shares 2 cores with the hosts' TCP). The value it replaces is kept on
    OVS's own row too (our external id), so 'clean' gives it back whatever the state file says."""
    was = _ovs_get("other_config:pmd-maxsleep")
    kept = _ovs_get(f"external_ids:{OVS_WAS}")
    if kept is not None:  # an earlier fabric changed it and was never cleaned: that one knows the original
        was = kept or None
    cmd = ["ovs-vsctl", "set", "open_vswitch", ".", "other_config:pmd-maxsleep=500",
           f"external_ids:{OVS_WAS}={json.dumps(was or '')}"]
    subprocess.run(cmd, capture_output=True)
    return {"pmd-maxsleep": was}


def _restore_ovs_tuning(saved: dict | None) -> None:
    """Give OVS back the setting ``_set_ovs_tuning`` changed (it is machine-wide, not ours): the value kept on
    OVS's row, else the state file's (a fabric of an earlier version)."""
    kept = _ovs_get(f"external_ids:{OVS_WAS}")
    if kept is not None:
        value = kept or None
    elif isinstance(saved, dict) and saved:
        value = saved.get("pmd-maxsleep")
    else:
        return
    if value is not None and not (isinstance(value, str) and value.isdigit()):
        value = None  # not a value _set_ovs_tuning saved: leave OVS's default
    forget = ["--", "remove", "open_vswitch", ".", "external_ids", OVS_WAS]
    if value:
        subprocess.run(["ovs-vsctl", "set", "open_vswitch", ".", f"other_config:pmd-maxsleep={value}", *forget],
                       capture_output=True)
    else:
        subprocess.run(["ovs-vsctl", "remove", "open_vswitch", ".", "other_config", "pmd-maxsleep", *forget],
                       capture_output=True)


def controller_status(st: FabricState) -> dict | None:
    """The controller's status file (None: not written yet, or half written, or not a status)."""
    try:
        doc = json.loads((st.directory / "status.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _wait_ready(st: FabricState, fabric: Fabric, log) -> dict:
    """Until the controller verified every switch's flows and every cable (and PFC's daemon is
    ready); fails as soon as the status shows a difference from the plan that will not go away."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    status = None
    while time.monotonic() < deadline:
        if not controller_alive(st):
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
    """Stop the fabric's processes and remove what ``up`` recorded and is ours (the markers ``clean`` checks);
    return the timings. What the state file names but is not ours is left alone, and named."""
    require_root()
    st = require_state()
    t0 = time.monotonic()
    failed = []
    for step in (lambda: _stop_pfc(st), lambda: _stop_controller_process(st)):
        try:  # a step that fails must not leave the rest of the fabric standing
            step()
        except Exception as exc:  # noqa: BLE001 - reported below, after the teardown
            failed.append(f"{type(exc).__name__}: {exc}")
    left_alone: list[str] = []
    timings = build.teardown(st.created, left_alone)
    _restore_ovs_tuning(st.ovs_restore or {})
    state_file().unlink(missing_ok=True)
    _drop_lifeline()
    if failed:
        raise EnvironmentProblem(f"the fabric is down, but stopping its processes failed: {failed[0]}; "
                                 "'testbed clean' sweeps what is left")
    if left_alone:
        raise EnvironmentProblem(f"the fabric is down; left alone {len(left_alone)} things the state file named "
                                 f"that are not ours (no marker of ours): {', '.join(left_alone[:6])}"
                                 f"{' ...' if len(left_alone) > 6 else ''}")
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
    """Backlog, drops and sent counters of every queue, through netlink (``qstats``: one qdisc dump per
    namespace, decoded with struct). A row whose device or bfifo is gone (fabric going down) has no counters:
    callers must not read a missing field as 0. A sampler that reads again and again keeps a
    ``qstats.QueueReader`` open instead."""
    from testbed.emulation import qstats

    with qstats.QueueReader(st.queues) as reader:
        return reader.read()


def pfc_state(st: FabricState) -> dict:
    """The pause daemon's live view (its status file, rewritten once a second)."""
    if not st.pfc_enabled:
        return {"enabled": False}
    try:
        doc = json.loads((st.directory / pfc_files.STATUS_FILE).read_text())
    except (OSError, ValueError):
        return {"enabled": True, "alive": False}
    alive = _alive(doc.get("pid")) if isinstance(doc.get("pid"), int) else False
    return {"enabled": True, "alive": alive, "age_s": round(time.time() - doc.get("updated", 0), 1),
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
        "controller": {"pid": st.controller_pid, "alive": controller_alive(st),
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
