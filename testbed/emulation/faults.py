"""Faults on the running fabric: a cable or a switch loses carrier, the controller stops and starts.

A cable goes down the way a real one does: both of its ends lose carrier at once (``datapath.cut_devices``),
so OVS reports the switch port down (a port-status to the controller, a dead watch port to the groups) and
the kernel flushes the queue in front of it. A switch goes down as all its cables at once. Every change is
appended to ``faults.jsonl`` in the state directory (CLOCK_MONOTONIC times, as the agents record theirs), and
the faults in force are in ``faults.json``, so ``status`` shows them and a second ``down`` is refused.
"""

from __future__ import annotations

import json
import time

from pyroute2 import IPRoute

from common.errors import EnvironmentProblem, TestbedError
from fabrics import Fabric
from fabrics.datapath import cut_devices
from fabrics.failover import Target, parse_target
from testbed.emulation import fabricctl
from testbed.emulation.state import FabricState

ACTIONS = {"link": ("down", "up"), "switch": ("down", "up"), "controller": ("stop", "start", "restart")}
RESTORE_TIMEOUT_S = 30


def target_of(fabric: Fabric, text: str, action: str) -> Target:
    """The target, with the action checked against its kind; one line naming what is accepted otherwise."""
    target = parse_target(fabric, text)
    if action not in ACTIONS[target.kind]:
        raise TestbedError(f"fault action {action!r} for {target.kind}: expected {' or '.join(ACTIONS[target.kind])}")
    return target


def inject(text: str, action: str, log=print, wait: bool = True) -> dict:
    """Apply one fault action to the running fabric; the event as logged. ``wait``: after an ``up``, until the
    controller reports every port up and every switch holding its planned rules again."""
    fabricctl.require_root()
    st = fabricctl.require_state()
    fabric = st.model()
    target = target_of(fabric, text, action)
    t0 = time.monotonic()
    active = fabricctl.faults_in_force(st)
    carrier = None
    if target.kind == "controller":
        _controller(st, action, log)
    else:
        carrier = _carrier(fabric, target, action, active)
    event = {"t": t0, "target": target.text, "action": action, "took_s": round(time.monotonic() - t0, 4)}
    if carrier:  # when the first device changed state, how long setting them all took, when each began
        event["t_carrier"], event["carrier_s"] = carrier[0], round(carrier[1] - carrier[0], 6)
        event["t_devices"] = carrier[2]
    if wait and action == "up":
        event["restored_s"] = round(wait_restored(st) - t0, 4)
    _record(st, event, active)
    return event


def _carrier(fabric: Fabric, target: Target, action: str, active: dict) -> tuple[float, float, dict]:
    """Set the admin state of the devices that cut the target's cables; refuse a no-op. The CLOCK_MONOTONIC
    times just before the first device's change and just after the last's, and when each device's change
    began: the kernel takes the peer's carrier away at the start of the call (veth_close), and the call then
    waits for the qdisc's deactivation (an RCU grace period: tens of ms on a busy machine)."""
    if action == "down" and target.text in active:
        raise TestbedError(f"{target.text} is already down (since {active[target.text]:.3f})")
    if action == "up" and target.text not in active:
        down = ", ".join(active) or "nothing"
        raise TestbedError(f"{target.text} is not down; down now: {down}")
    devs = cut_devices(fabric, target.cut_ends(fabric))
    if action == "up":  # a device another fault still holds down stays down
        held = {d for other in active if other != target.text
                for d in cut_devices(fabric, parse_target(fabric, other).cut_ends(fabric))}
        devs = [d for d in devs if d not in held]
    with IPRoute() as ipr:
        found = []
        for dev in devs:
            idx = ipr.link_lookup(ifname=dev)
            if not idx:
                raise EnvironmentProblem(f"device {dev} of {target.text} is gone: is the fabric whole?")
            found.append(idx[0])
        began = {}
        for dev, idx in zip(devs, found):
            began[dev] = time.monotonic()
            ipr.link("set", index=idx, state=action)
        return min(began.values(), default=time.monotonic()), time.monotonic(), began


def _controller(st: FabricState, action: str, log) -> None:
    if action in ("stop", "restart"):
        if not fabricctl.controller_alive(st):
            raise TestbedError("the controller is not running: 'testbed fault controller start' starts it")
        fabricctl.stop_controller(st)
    if action in ("start", "restart"):
        fabricctl.start_controller(st, log)


def wait_restored(st: FabricState, timeout: float = RESTORE_TIMEOUT_S) -> float:
    """When the controller's status shows no port down and every switch verified with no difference from
    its program: the fabric is back on its planned paths (read back and compared)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = fabricctl.controller_status(st) or {}
        switches = status.get("switches") or {}
        if (switches and not status.get("ports_down")
                and all(s["verified"] and not s["mismatch"] for s in switches.values())):
            return time.monotonic()
        time.sleep(0.02)
    raise EnvironmentProblem(f"the fabric was not back on its planned paths within {timeout:g} s "
                             f"(ports down: {', '.join(status.get('ports_down') or []) or 'none'})")


def _record(st: FabricState, event: dict, active: dict) -> None:
    if event["action"] == "down":
        active[event["target"]] = event["t"]
    elif event["action"] == "up":
        active.pop(event["target"], None)
    tmp = st.directory / (fabricctl.FAULTS_IN_FORCE + ".tmp")
    tmp.write_text(json.dumps(active))
    tmp.replace(st.directory / fabricctl.FAULTS_IN_FORCE)
    with open(st.directory / fabricctl.FAULT_LOG, "a") as fh:
        fh.write(json.dumps(event) + "\n")
