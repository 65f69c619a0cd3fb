"""testbed.emulation.fabricctl's helpers over a recorded state (no fabric): the command line `testbed exec` runs,
the drops of every queue added up."""

from __future__ import annotations

import pytest

from common.errors import TestbedError
from testbed.emulation import fabricctl
from testbed.emulation.state import FabricState

FABRIC = {"kind": "zcube", "gpus": 16, "gpus_per_switch": 8, "cables": 4}


def test_exec_runs_the_command_in_the_gpus_namespace_and_refuses_another_host(tmp_path, monkeypatch):
    st = FabricState(fabric=dict(FABRIC), state_dir=str(tmp_path))
    monkeypatch.setattr(fabricctl, "require_state", lambda: st)
    assert fabricctl.fabric_of_state(st).n_gpus == 16
    assert fabricctl.exec_argv("gpu3", ["ping", "-c1", "10.2.0.17"]) == [
        "ip", "netns", "exec", f"{fabricctl.NETNS_PREFIX}gpu3", "ping", "-c1", "10.2.0.17"]
    for host in ("gpu17", "gpu0", "sw1", "gpux"):
        with pytest.raises(TestbedError, match=rf"host '{host}' is not in this fabric: expected gpu1 \.\. gpu16"):
            fabricctl.exec_argv(host, ["true"])
    with pytest.raises(TestbedError, match="exec needs a command after '--'"):
        fabricctl.exec_argv("gpu1", [])


def test_total_drops_add_up_every_queue_a_row_without_counters_adding_none(monkeypatch):
    monkeypatch.setattr(fabricctl, "read_queues", lambda st: [{"drops": 3}, {"drops": 4, "backlog": 9}, {}])
    assert fabricctl.total_drops(None) == 7
