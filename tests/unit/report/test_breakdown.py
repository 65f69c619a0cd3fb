"""testbed.report.breakdown: which repetitions' breakdowns are drawn, the rows of its tables, and the slowest
message's link named on the fabric model (ZCube n=16 by hand: gpu9 is reached from sw1 on cable
((9-1) mod 8) // 2 = 0 of sw1-sw4)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from testbed.report import breakdown

TTFT = {"p50": {"ttft": 100.0, "kv_transfer": 20.0}, "p99": {"ttft": 300.0, "kv_transfer": 90.0},
        "tail_mean": {"ttft": 320.0, "requests": 4}}
STEPS = {"mean": {"total": 10.0, "dispatch": 3.0}, "p50": {"total": 9.0}, "p99": {"total": 30.0}, "steps": 325,
         "slowest": {"dispatch": {"steps": 325, "pairs": [{"src": "gpu1:p1", "dst": "gpu9:p2", "steps": 120}]}}}


def _exp(summaries: dict, params: dict | None = None) -> SimpleNamespace:
    reps = {f: [SimpleNamespace(index=i + 1, summary=s, config={"fabric": params or {"gpus": 16, "gpus_per_switch": 8}})
                for i, s in enumerate(ss)] for f, ss in summaries.items()}
    return SimpleNamespace(fabrics=list(summaries), reps=reps, path=Path("/nonexistent"))


def test_only_repetitions_that_recorded_a_breakdown_are_drawn():
    exp = _exp({"zcube": [{"ttft_breakdown_ms": TTFT}, {}], "roft": [{"ttft_breakdown_ms": {"p50": None}}]})
    assert [(f, k) for f, k, _ in breakdown._bars(exp, "ttft_breakdown_ms")] == [("zcube", 1)]
    assert breakdown._bars(exp, "decode_step_breakdown_ms") == []
    assert breakdown.section(_exp({"zcube": [{}]}), Path("/nonexistent")) is None  # nothing recorded: no section


def test_the_rows_carry_each_group_and_the_tail_count():
    exp = _exp({"zcube": [{"ttft_breakdown_ms": TTFT}]})
    rows = breakdown._rows(exp, "ttft_breakdown_ms", breakdown.GROUPS, ["kv_transfer"], "ttft")
    assert [r[2:] for r in rows] == [["P50 request", "100", "20.0", "-"], ["P99 request", "300", "90.0", "-"],
                                     ["tail mean (P99 and slower)", "320", "-", "4"]]


def test_the_slowest_link_is_named_on_the_fabric_model():
    exp = _exp({"zcube": [{"decode_step_breakdown_ms": STEPS}]})
    assert breakdown.slowest_link(exp, "zcube", "dispatch") == (
        "gpu1:p1 -> gpu9:p2 in 120 of 325 steps: gpu1:p1->sw1, sw1->sw4#0, sw4->gpu9:p2")
    assert breakdown.slowest_link(exp, "zcube", "combine") == "not recorded"
    broken = _exp({"zcube": [{"decode_step_breakdown_ms": STEPS}]}, params={"gpus": 12, "gpus_per_switch": 8})
    assert breakdown.slowest_link(broken, "zcube", "dispatch") == "gpu1:p1 -> gpu9:p2 in 120 of 325 steps"
