"""testbed.bench.cpu_use: roles of processes, cores between two snapshots, and a window that keeps what a
process used before it ended."""

from __future__ import annotations

import time

from testbed.bench import cpu_use


def test_roles_from_command_lines():
    me, launchers = 10, {20}
    assert cpu_use.role_of(10, "python", "", 1, me, launchers) == "main"
    assert cpu_use.role_of(11, "python", "python -m traffic.runtime.host cfg.json", 1, me, launchers) == "host"
    assert cpu_use.role_of(12, "python", "python -m traffic.runtime.coordinator c", 1, me, launchers) == "coordinator"
    assert cpu_use.role_of(20, "python", "python -m traffic.runtime.launcher --specs f", 1, me, launchers) == \
        "launcher"
    assert cpu_use.role_of(21, "python", "python -m traffic.runtime.launcher --specs f", 20, me, launchers) == \
        "agents"
    assert cpu_use.role_of(30, "iperf3", "", 1, me, launchers) == "iperf3"
    assert cpu_use.role_of(31, "bash", "bash", 1, me, launchers) is None


def test_cores_between_snapshots_add_up_and_a_gone_process_counts_its_last_sight():
    a = cpu_use.Snapshot(0.0, per_pid={(1, "host"): 100, (2, "agents"): 50},
                         machine={"busy": 1000, "softirq": 10, "irq": 0, "total": 4000})
    b = cpu_use.Snapshot(2.0, per_pid={(1, "host"): 300, (2, "agents"): 150, (3, "agents"): 20},
                         machine={"busy": 1000 + 2 * cpu_use.TICK, "softirq": 10 + cpu_use.TICK // 10, "irq": 0,
                                  "total": 4400})
    out = cpu_use.between(a, b)
    tick = cpu_use.TICK
    assert out["host"] == round(200 / tick / 2, 3) and out["agents"] == round(120 / tick / 2, 3)
    assert out["busy"] == 1.0 and out["other"] >= 0


def test_a_window_measures_this_process():
    with cpu_use.Window(every_s=0.05) as w:
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            pass
    assert w.cores["main"] > 0.3 and w.cores["span_s"] >= 0.3 and "load average" in cpu_use.load_line()
