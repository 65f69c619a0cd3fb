"""fabrics.describe, directly: what `testbed plan` and `testbed path` print and write (tests/unit/cli/test_plan.py
runs them through the command line)."""

from fabrics import build_fabric
from fabrics.describe import comparison_text, path_text, plan_json, plan_text


def test_the_plan_counts_what_the_model_has():
    z = build_fabric("zcube", gpus=32, gpus_per_switch=8)
    doc = plan_json(z)
    assert (doc["fabric"], doc["gpus"], doc["switches"]) == ("zcube", 32, 8)
    assert len(doc["nodes"]) == 8 + 32 and len(doc["links"]) == len(z.cables)
    assert doc["cost"]["switches"] == 8 and doc["rules"] > 0
    gpu3 = next(n for n in doc["nodes"] if n["name"] == "gpu3")
    assert set(gpu3["ports"]) == {"p1", "p2"} and gpu3["ports"]["p1"]["switch"] == z.switch_of(3, 1)
    text = plan_text(z)
    assert text.splitlines()[0] == z.describe() and "switches        8 (" in text
    assert "GPUs            32, dual-port NICs (64 NIC ports)" in text


def test_the_comparison_is_zcube_over_roft_and_a_path_lists_each_port_pair():
    z, r = build_fabric("zcube", gpus=32, gpus_per_switch=8), build_fabric("roft", gpus=32)
    assert comparison_text(z, r).startswith("zcube/roft: switches 0.67, ")
    assert path_text(z, 3, 17).splitlines()[1:] == ["  gpu3:p1 -> sw5 -> sw6 -> gpu17:p2",
                                                    "  gpu3:p2 -> sw2 -> sw1 -> gpu17:p1"]
