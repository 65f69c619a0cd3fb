"""An experiment's faults as timed actions, and what a run says when one was late or not applied."""

from testbed.backends.emulated.faults import Action, actions
from testbed.repetition.writeup import _warn_on_checks


def test_each_fault_becomes_its_action_and_its_undo_in_time_order():
    specs = [{"at": 6.0, "duration": 3.0, "target": "link sw1:9", "action": "down"},
             {"at": 9.5, "duration": None, "target": "controller", "action": "restart"},
             {"at": 2.0, "duration": 1.0, "target": "controller", "action": "stop"},
             {"at": 10.0, "duration": None, "target": "link gpu17:p2", "action": "down"}]
    assert actions(specs) == [Action(2.0, "controller", "stop"), Action(3.0, "controller", "start"),
                              Action(6.0, "link sw1:9", "down"), Action(9.0, "link sw1:9", "up"),
                              Action(9.5, "controller", "restart"), Action(10.0, "link gpu17:p2", "down")]


def test_a_late_or_unapplied_fault_is_named_in_the_warnings():
    summary = {"pfc": {"enabled": False, "pauses": 0}, "warnings": [], "start_lateness_ms": {"p99": 1.0},
               "invariants": {"violations": [], "margins": {"uncounted_loss_bytes": 0, "lost_at_cut_bytes": 0}},
               "faults": [{"trace_s": 6.0, "target": "link sw1:9 sw2:9", "action": "down", "late_ms": 91.0},
                          {"trace_s": 9.0, "target": "link sw1:9 sw2:9", "action": "up", "late_ms": 1.0}],
               "fault_errors": ["restart controller at 9.5 s: the controller is not running"]}
    _warn_on_checks(summary, 0)
    assert summary["warnings"] == [
        "FAULT NOT APPLIED: restart controller at 9.5 s: the controller is not running",
        "fault down link sw1:9 sw2:9 came 91 ms of wall time after its run time 6 s"]
