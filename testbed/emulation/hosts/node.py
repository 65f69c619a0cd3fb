"""One host's part of a fabric spread over several hosts: ``python -m testbed.emulation.hosts.node ACTION
--spec FILE``, run there by ``cluster`` over SSH (as root, from this project's checkout).

The spec (JSON, written by ``cluster.node_spec``) names the whole fabric, its datapath and PFC settings,
the hosts in order with their underlay addresses, which host this is, the controller's address and the
tunnel kind. Every host computes the same whole plan, the same placement and its own part
(``tunnels.split``), and builds that part with the code that builds a one-host fabric
(``build.build``), after making its tunnel devices (alias and link group of the fabric's, so
``testbed down`` and ``testbed clean`` on that host remove them like any other device of ours). Each
host saves its own state file, so the one-host ``down`` / ``clean`` work there unchanged.

Actions (each prints one JSON document on stdout; a failure is one line on stderr, exit 1):

* ``controller`` (first host): bind the OpenFlow port on the first host's underlay address (not
  0.0.0.0) and start the one controller on the whole fabric (its pause-daemon start is off: every host
  runs its own daemon on its own queues);
* ``build``: tunnels, the host's part, and with PFC its pause daemon on its own policy
  (``tunnels.pfc_policy_for``: remote feeders are paused by 802.1Qbb frames through the tunnels);
* ``wait`` (first host): until the controller verified every switch and every cable, on all hosts;
* ``finish``: the first send that makes OVS open its socket, and the send-buffer check;
* ``queues``: every queue of this host (``fabricctl.read_queues``);
* ``pfc``: this host's pause log, latency lines and daemon status;
* ``down``: stop this host's pause daemon, then the one-host ``down``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from common import owned
from common.errors import EnvironmentProblem, TestbedError
from common.paths import REPO, module_env
from fabrics import build_fabric
from fabrics.datapath import ALIAS, LINK_GROUP, DatapathConfig, plan_datapath
from pfc import files as pfc_files
from testbed.emulation import build, fabricctl, inventory
from testbed.emulation.hosts import assign, tunnels
from testbed.emulation.state import Created, FabricState

NODE_FILE = "node.json"  # this host's role and pause daemon, next to the state file
PFCD_READY_S = 30.0


def part_of(spec: dict):
    """(fabric, whole plan, placement, this host's part) for a spec."""
    fabric = build_fabric(**spec["fabric"])
    plan = plan_datapath(fabric, DatapathConfig.from_dict(spec["datapath"]))
    where = assign.assign(fabric, spec["hosts"], spec.get("anchor_port", 1))
    return fabric, plan, where, tunnels.split(plan, where, spec["host"])


def controller_config(spec: dict, sdir: Path) -> dict:
    """The controller's config: the whole fabric, its pause daemon off (each host runs its own), listening
    on the first host's underlay address."""
    return {"fabric": spec["fabric"], "status_file": str(sdir / "status.json"), "state_dir": str(sdir),
            "datapath": spec["datapath"], "pfc": {"enabled": False}, "failover": "fast",
            "listen_host": spec["controller"]["host"]}


def _new_state(spec: dict, part) -> FabricState:
    fabricctl.require_root()
    fabricctl.require_ovs()
    fabricctl._refuse_second_fabric()
    sdir = fabricctl._fresh_state_dir()
    fabric = build_fabric(**spec["fabric"])
    _, limits = fabricctl.pfc_with_limits(fabric, DatapathConfig.from_dict(spec["datapath"]), _pfc_config(spec))
    mine = {q.qid for q in part.plan.queues}
    return FabricState(fabric=dict(spec["fabric"]), config=dict(spec["datapath"]), created=Created(),
                       queues=[asdict(q) for q in part.plan.queues], state_dir=str(sdir), pfc=dict(spec["pfc"]),
                       queue_limits={q: v for q, v in limits.items() if q in mine},
                       extra={"multihost": {"host": spec["host"], "hosts": spec["hosts"]}})


def _pfc_config(spec: dict):
    if not spec["pfc"].get("enabled"):
        return None
    from pfc import policy as pfc_policy

    return pfc_policy.PfcConfig.from_dict(spec["pfc"])


def do_controller(spec: dict) -> dict:
    """First host: the controller, listening on this host's underlay address only."""
    _, _, _, part = part_of(spec)
    st = _new_state(spec, part)
    listener = fabricctl.listen(int(spec["controller"].get("port", 0)), spec["controller"]["host"])
    st.controller_port = listener.getsockname()[1]
    fabricctl._save(st)
    sdir = st.directory
    owned.write_private(sdir / inventory.CONTROLLER_CONFIG, json.dumps(controller_config(spec, sdir)))
    argv = [sys.executable, *inventory.controller_args(st.controller_port, listener.fileno(), sdir, None)]
    with listener, owned.open_private(sdir / "controller.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                                start_new_session=True, env=module_env(), pass_fds=(listener.fileno(),))
    st.controller_pid, st.controller_start, st.controller_argv = proc.pid, owned.start_time(proc.pid), argv
    fabricctl._save(st)
    _write_node(st, {"role": "controller", "host": spec["host"]})
    return {"port": st.controller_port, "pid": proc.pid}


def _write_node(st: FabricState, doc: dict) -> None:
    path = st.directory / NODE_FILE
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    owned.write_private(path, json.dumps(old | doc))


def read_node(st: FabricState) -> dict:
    try:
        return json.loads((st.directory / NODE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def do_build(spec: dict) -> dict:
    """This host's part: tunnels, namespaces, links, switches pointed at the controller, queues, PFC."""
    t0 = time.monotonic()
    fabric, _, _, part = part_of(spec)
    st = fabricctl.load_state()
    if st is None or st.extra.get("multihost", {}).get("host") != spec["host"]:
        st = _new_state(spec, part)
        fabricctl._save(st)
    addr = spec["addresses"]
    try:
        restore = fabricctl._prepare_ovs_send_buffer(st)
        st.ovs_restore = fabricctl._set_ovs_tuning()
        _write_node(st, {"wmem_restore": restore})
        make_tunnels(part, addr, spec, st.created)
        fabricctl._save(st)
        bpf_obj = fabricctl._prepare_queue_watch(st.directory) if st.pfc_enabled else None
        try:
            build.build(part.plan, int(spec["controller"]["port"]), st.created, st.timings, st.queue_limits,
                        bpf_obj, controller_host=spec["controller"]["host"])
        finally:
            fabricctl._save(st)
        build.wait_ovs_ports(part.plan)
        pfcd = start_pfcd(st, fabric, spec, part) if st.pfc_enabled else None
    except BaseException:
        do_down(quiet=True)
        raise
    st.timings["host_build_s"] = round(time.monotonic() - t0, 3)
    fabricctl._save(st)
    return {"host": spec["host"], "switches": len(part.plan.ovs_ports), "gpus": len(part.plan.hosts),
            "tunnels": len(part.tunnels), "queues": len(part.plan.queues), "pfcd": pfcd,
            "timings": st.timings}


def make_tunnels(part, addresses: dict[str, str], spec: dict, created: Created) -> None:
    """One device per cross-host cable, marked as the fabric's (alias, link group) and recorded."""
    if not part.tunnels:
        return
    lines = tunnels.link_lines(part.tunnels, addresses[part.host], addresses, spec["datapath"]["mtu"],
                               spec.get("tunnel", tunnels.DEFAULT_KIND), alias=ALIAS, group=LINK_GROUP)
    made = [t.dev for t in part.tunnels]
    try:
        build.run(["ip", "-batch", "-"], "\n".join(lines) + "\n")
    finally:
        out = subprocess.run(["ip", "-o", "link", "show", "group", str(LINK_GROUP)], capture_output=True, text=True)
        present = {ln.split(":")[1].strip().split("@")[0] for ln in out.stdout.splitlines() if ":" in ln}
        created.links.extend(d for d in made if d in present)
    build.offloads_off(made)


def start_pfcd(st: FabricState, fabric, spec: dict, part) -> dict:
    """This host's pause daemon, on its own queues, started as the controller would (same arguments, so
    ``clean`` knows it); returns its pid once it is ready."""
    from pfc import policy as pfc_policy
    from pfc.files import POLICY_FILE
    from pfc.launch import pfcd_args

    sdir = st.directory
    whole = pfc_policy.daemon_policy(fabric, DatapathConfig.from_dict(spec["datapath"]),
                                     pfc_policy.PfcConfig.from_dict(spec["pfc"]), str(sdir))
    doc = tunnels.pfc_policy_for(whole, part)
    owned.write_private(sdir / POLICY_FILE, json.dumps(doc, indent=1))
    with owned.open_private(sdir / "pfcd.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, *pfcd_args(sdir)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=REPO, env=module_env(), start_new_session=True)
    _write_node(st, {"pfcd": {"pid": proc.pid, "start": owned.start_time(proc.pid)}})
    status = sdir / pfc_files.STATUS_FILE
    deadline = time.monotonic() + PFCD_READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (sdir / "pfcd.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise EnvironmentProblem(f"the pause daemon exited during bring-up: {tail}")
        if status.exists():
            return {"pid": proc.pid, "remote_feeders": len(doc["remote_feeders"]), "pause_rx": len(doc["pause_rx"])}
        time.sleep(0.1)
    raise EnvironmentProblem(f"the pause daemon was not ready within {PFCD_READY_S:g} s (see {sdir / 'pfcd.log'})")


def do_wait(spec: dict) -> dict:
    """First host: until the controller verified the whole fabric (its own pause daemon is off)."""
    st = fabricctl.require_state()
    status = fabricctl._wait_ready(replace(st, pfc={"enabled": False}), st.model(), lambda m: None)
    st.controller_status = {"miss_packets": status["miss_packets"], "cabling": status["cabling"]}
    fabricctl._save(st)
    return {"switches": len(status["switches"]), "cabling": {k: status["cabling"][k]
                                                               for k in ("expected", "confirmed")}}


def do_finish(spec: dict) -> dict:
    _, _, _, part = part_of(spec)
    st = fabricctl.require_state()
    if part.plan.hosts:
        fabricctl._first_send(part.plan)
    fabricctl._check_send_buffer(st, read_node(st).get("wmem_restore"))
    fabricctl._save(st)
    return {"warnings": st.warnings}


def do_queues(spec: dict | None = None) -> list[dict]:
    return fabricctl.read_queues(fabricctl.require_state())


def do_pfc(spec: dict | None = None) -> dict:
    st = fabricctl.require_state()
    out = {}
    for key, name in (("log", pfc_files.LOG_FILE), ("latency", pfc_files.LATENCY_FILE)):
        try:
            out[key] = (st.directory / name).read_text().splitlines()
        except OSError:
            out[key] = []
    try:
        out["status"] = json.loads((st.directory / pfc_files.STATUS_FILE).read_text())
    except (OSError, ValueError):
        out["status"] = {}
    return out


def _stop_pfcd(st: FabricState) -> None:
    rec = read_node(st).get("pfcd") or {}
    if isinstance(rec.get("pid"), int):
        sdir = st.directory
        owned.stop(rec["pid"], rec.get("start"), lambda info: inventory.our_process(info, sdir) == "PFC helper")
    if st.pfc_enabled:
        from pfc import queue_watch

        queue_watch.remove_pins()


def do_down(spec: dict | None = None, quiet: bool = False) -> dict:
    """Stop this host's pause daemon, then the one-host ``down`` (controller, devices, switches)."""
    st = fabricctl.load_state()
    if st is None:
        return {"down": False}
    try:
        _stop_pfcd(st)
        timings = fabricctl.down()
    except Exception:
        if quiet:
            return {"down": False}
        raise
    return {"down": True, "timings": timings}


ACTIONS = {"controller": do_controller, "build": do_build, "wait": do_wait, "finish": do_finish,
           "queues": do_queues, "pfc": do_pfc, "down": do_down}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="testbed.emulation.hosts.node")
    ap.add_argument("action", choices=sorted(ACTIONS))
    ap.add_argument("--spec", help="the node spec (JSON), for every action but queues, pfc and down")
    args = ap.parse_args(argv)
    try:
        spec = json.loads(Path(args.spec).read_text()) if args.spec else None
        if spec is None and args.action in ("controller", "build", "wait", "finish"):
            raise TestbedError(f"node {args.action} needs --spec FILE")
        doc = ACTIONS[args.action](spec)
    except TestbedError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
