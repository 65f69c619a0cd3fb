"""What a twin run tells its user before and while it runs: the estimate's model (testbed.backends.ns3.estimate)
and the progress line's arithmetic (apps.Progress). No ns-3 needed."""

from __future__ import annotations

import pytest

from testbed.backends.ns3 import apps, estimate
from testbed.backends.ns3.backend import Ns3Backend
from testbed.experiment import run
from testbed.experiment.schema import Override, cli_value, resolve


def test_the_model_is_events_per_cluster_second_over_events_per_wall_second_plus_a_fixed_part():
    base = estimate.wall_per_cluster_s(32, 128)
    assert base == pytest.approx(estimate.EVENTS_PER_CLUSTER_S / estimate.EVENTS_PER_WALL_S)
    # 16x the requests in flight: 16^0.98 x the events; 16x the GPUs: 16^0.165 x the cost of each
    assert estimate.wall_per_cluster_s(512, 2048) == pytest.approx(base * 16 ** estimate.IN_FLIGHT_EXP
                                                                    * 16 ** estimate.N_EXP)
    # links standing for 100 Gbit/s carry twice the emulated bytes
    assert estimate.wall_per_cluster_s(512, 2048, 2.0) / estimate.wall_per_cluster_s(512, 2048) == pytest.approx(
        2 ** estimate.BYTES_EXP)
    # over the run length the constants were averaged on, the loop is that average x the run
    assert estimate.repetition_s(512, 2048, 32.0) == pytest.approx(estimate.fixed_s(512, 32.0)
                                                                   + 32 * estimate.wall_per_cluster_s(512, 2048))
    # a closed loop's first seconds cost less: quadratic up to the ramp, linear after it, continuous
    per = estimate.wall_per_cluster_s(512, 2048)
    r = estimate.RAMP_S
    assert estimate.loop_s(r / 2, per) == pytest.approx(estimate.loop_s(r, per) / 4)
    assert estimate.loop_s(r + 1e-9, per) == pytest.approx(estimate.loop_s(r - 1e-9, per))


def exp_of(*sets):
    """The default experiment on the twin with ``sets`` applied."""
    ovs = [Override(k, cli_value(k, v), "--set") for k, _, v in (s.partition("=") for s in ("backend=ns3",) + sets)]
    return resolve(None, ovs).experiment


def test_an_experiment_s_estimate_follows_its_size_load_and_represented_rate():
    small, _ = estimate.for_experiment(exp_of("gpus=32"))
    big, how = estimate.for_experiment(exp_of("gpus=512", "gpus_per_switch=auto", "serving.concurrency=2048"))
    slow, _ = estimate.for_experiment(exp_of("gpus=512", "gpus_per_switch=auto", "serving.concurrency=2048",
                         "link.represents=100gbit"))
    assert small < big < slow and "wall s per cluster s" in how and "n=512" in how
    # trace-timed arrivals: no load model, the flat fallback
    assert estimate.for_experiment(exp_of("serving.arrivals=trace", "trace.workload=azure-conversation")) is None


def test_the_fit_reproduces_the_measured_runs():
    # loop CPU s per cluster s over 32 cluster s: n=32 ZCube / ROFT 1.12 / 1.42; n=512 ROFT 30.1
    assert estimate.wall_per_cluster_s(32, 128) == pytest.approx(1.27, rel=0.15)
    per = estimate.wall_per_cluster_s(512, 2048)
    assert per == pytest.approx(30.1, rel=0.1)
    # n=512 ROFT's loop: 22, 120 and 962 CPU s for 4, 8 and 32 cluster s (the closed loop's ramp)
    assert estimate.loop_s(32, per) == pytest.approx(962, rel=0.1)
    assert estimate.loop_s(8, per) == pytest.approx(120, rel=0.15)
    assert estimate.loop_s(4, per) == pytest.approx(22, rel=0.5)
    # the 32-cluster-s repetition took 1322 wall s with the write-up and report (168 s besides the loop)
    assert estimate.repetition_s(512, 2048, 32.0) == pytest.approx(962 + 168, rel=0.1)


def test_the_agentic_workload_costs_what_its_runs_measured():
    # events per cluster s at dilation 4 (a third of the fit's emulated bytes): n=32, 32 in flight, 364k; n=512,
    # 448 in flight, 5.0M (both over runs shorter than the fit's 32 s, so within 15-20 %)
    third = 1 / 3
    assert estimate.events_per_cluster_s(32, third, "agentic-coding") == pytest.approx(364e3, rel=0.15)
    assert estimate.events_per_cluster_s(448, third, "agentic-coding") == pytest.approx(5.0e6, rel=0.2)
    # a trace file or a workload without a measured factor: the chat trace's fit
    assert estimate.events_per_cluster_s(32, third, "mooncake-conversation") == estimate.events_per_cluster_s(32, third)
    agentic, how = estimate.for_experiment(exp_of("gpus=32"))
    chat, _ = estimate.for_experiment(exp_of("gpus=32", "trace.workload=azure-conversation"))
    assert agentic > chat and "of agentic-coding" in how


def test_run_prints_the_backend_s_estimate_with_ns3_s_loading_once():
    exp = exp_of("gpus=32")
    per, _ = estimate.for_experiment(exp)
    twin = Ns3Backend()
    assert run.estimate_s(exp, twin) == pytest.approx(estimate.LOAD_S + len(exp.fabrics) * exp.repetitions * per)
    assert "wall s per cluster s" in run.estimate_text(exp, twin) and "once" in run.estimate_text(exp, twin)


def test_progress_says_where_the_run_is_its_pace_and_what_is_left_every_so_often():
    lines, clock = [], [100.0]
    p = apps.Progress(lines.append, target_cluster_s=32.0, dilation=12.0, every_s=30.0, clock=lambda: clock[0])
    clock[0] = 110.0
    p.tick(48.0, lambda: 7)
    assert lines == []  # not yet 30 wall s
    clock[0] = 140.0  # 40 wall s: 4 of 32 cluster s (48 simulated s / 12): 10 wall s per cluster s
    p.tick(48.0, lambda: 7)
    assert len(lines) == 1
    assert "4.00 of 32 cluster s (12 %) in 40 wall s; 10 wall s per cluster s lately (10 on average)" in lines[0]
    assert "ETA 4.7 min at the recent pace" in lines[0] and "7 messages in flight" in lines[0]  # 28 x 10 = 280 s
    p.tick(60.0, lambda: 7)
    assert len(lines) == 1  # the next one 30 wall s later
    clock[0] = 180.0  # 40 wall s more for 1 cluster s more: 40 lately, 16 on average (80 s for 5)
    p.tick(60.0, lambda: 9)
    assert "5.00 of 32 cluster s" in lines[1] and "40 wall s per cluster s lately (16 on average)" in lines[1]
    assert "ETA 18.0 min" in lines[1]  # 27 x 40 = 1080 s
    clock[0] = 211.0
    p.tick(32 * 12 + 5.0, lambda: 3)
    assert "draining, 3 messages in flight, 5.0 of at most 30 simulated s" in lines[-1]


def test_progress_without_a_log_says_nothing():
    p = apps.Progress(None, 32.0, 12.0, clock=lambda: 1e9)
    p.tick(1.0, lambda: 0)
    assert p.lines == 0
