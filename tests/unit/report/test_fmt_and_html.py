"""testbed.report.fmt (numbers in the headline), testbed.report.html (the page's pieces, escaped) and
testbed.report.topology_and_cost (which capex the report shows), pinned."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.errors import TestbedError
from testbed.report import fmt, headline, html, topology_and_cost


@pytest.mark.parametrize("v,text", [(None, "-"), (True, "true"), (5, "5"), (1234.0, "1,234"), (1234567, "1,234,567"),
                                    (0.0, "0"), (12345.6, "12,346"), (0.0001234, "1.23e-04"), (5.6, "5.60"),
                                    (12.345, "12.3"), (100.0, "100"), (0.5, "0.500"), (-2.25, "-2.25")])
def test_num(v, text):
    assert fmt.num(v) == text


def test_cells_and_ratios():
    entry = {"goodput_bps": 12.3e6, "spread": {"goodput_bps": [11.9e6, 12.8e6]}, "verified": 9, "transfers": 10}
    assert fmt.cell_text(entry, "goodput_bps", 1e6, 3) == "12.3 [11.9, 12.8]"
    assert fmt.cell_text(entry, "goodput_bps", 1e6, 1) == "12.3"  # one repetition: no spread shown
    assert fmt.cell_text(entry, "verified", 1, 3) == "9/10"
    assert fmt.cell_text(None, "goodput_bps", 1e6, 3) == "-"
    assert fmt.scaled(entry, "fct_ms.p99", 1) == (None, None, None)
    assert fmt.ratio_text(None) == "-" and fmt.ratio_text(1.23456) == "1.235"
    assert [row[1] for row in headline.HEADLINE][:2] == ["goodput_bps", "goodput_real_equivalent_bps"]


def test_table_aligns_text_columns_left_and_keeps_ready_cells():
    assert html.table(["a", "b"], [["x", "1"], ['<td class="good">2</td>', "3"]]) == (
        '<table class=""><thead><tr><th class="l">a</th><th class="">b</th></tr></thead><tbody>'
        '<tr><td class="l">x</td><td class="">1</td></tr><tr><td class="good">2</td><td class="">3</td></tr>'
        "</tbody></table>")
    assert '<th class="">a</th><th class="l">b</th>' in html.table(["a", "b"], [], left={1})


def test_everything_from_a_run_is_escaped():
    assert html.fab("zcube") == '<span class="z">ZCube</span>' and html.fab("x<y") == '<span class="">x&lt;y</span>'
    assert html.banner(["drops <5>"]).count("<li>drops &lt;5&gt;</li>") == 1
    assert "Fidelity checks passed" in html.banner([])
    assert html.alert("a&b", ["c"], ("sec", "more")) == ('<div class="banner " role="alert"><b>a&amp;b</b> '
                                                         '<a href="#sec">more</a><ul><li>c</li></ul></div>')
    assert html.details("t", {"k": "<v>"}) == ("<details><summary>t</summary><pre>{\n &quot;k&quot;: "
                                               "&quot;&lt;v&gt;&quot;\n}</pre></details>")
    assert html.img(None, "c", "the picture") == '<p class="note">the picture: nothing to draw.</p>'


def test_a_failed_fidelity_banner_comes_first(tmp_path):
    page = html.page("T", "verdict", "sub", ["p"], [("s", "S")], [("s", "S", "<p>body</p>")], alerts=["<i>a</i>"])
    assert page.index('role="alert"><b>Fidelity check failed') < page.index("<i>a</i>") < page.index("<main>")
    ok = html.page("T", "verdict", "sub", [], [], [], alerts=["<i>a</i>"])
    assert ok.index("<i>a</i>") < ok.index('<div class="okbar">')  # a passed banner comes after the alerts


def _exp(tmp_path: Path, configs: dict) -> SimpleNamespace:
    reps = {f: [SimpleNamespace(config={"fabric": params})] for f, params in configs.items()}
    return SimpleNamespace(path=tmp_path, reps=reps, fabrics=list(configs))


def test_fabric_params_from_the_first_repetition_or_the_other_fabrics_size(tmp_path):
    exp = _exp(tmp_path, {"zcube": {"gpus": 16, "gpus_per_switch": 8}})
    assert topology_and_cost.fabric_params(exp, "zcube") == {"gpus": 16, "gpus_per_switch": 8, "kind": "zcube"}
    assert topology_and_cost.fabric_params(exp, "roft") == {"kind": "roft", "gpus": 16}
    assert topology_and_cost.fabric_params(_exp(tmp_path, {}), "roft") == {"kind": "roft", "gpus": 32}


def test_cost_file_shapes():
    z, r = {"capex_units": 2.0, "switches": 4}, {"capex_units": 4.0, "switches": 6}
    expect = {"zcube": z, "roft": r, "ratios": {"capex_units": 0.5, "switches": 0.6667}}  # 2/4; 4/6 rounded
    assert topology_and_cost._cost_from_file({"fabrics": {"zcube": z, "roft": r}}) == expect
    assert topology_and_cost._cost_from_file({"zcube": z, "roft": r, "ratio": {"x": 1}})["ratios"] == {"x": 1}
    assert topology_and_cost._cost_from_file({"zcube": z}) is None and topology_and_cost._cost_from_file([]) is None


def test_cost_prefers_the_runs_plan_file_then_the_model(tmp_path):
    exp = _exp(tmp_path, {"zcube": {"gpus": 16, "gpus_per_switch": 8}, "roft": {"gpus": 16}})
    model = topology_and_cost.cost(exp)
    assert model["source"] == "fabrics.cost model" and model["gpus"] == 16
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "cost.json").write_text(json.dumps({"fabrics": {"zcube": {"a": 1}, "roft": {"a": 2}}}))
    assert topology_and_cost.cost(exp) == {"zcube": {"a": 1}, "roft": {"a": 2}, "ratios": {"a": 0.5},
                                           "source": "plan/cost.json", "gpus": 16}
    (tmp_path / "plan" / "cost.json").write_text("[]")  # JSON, but not a capex document
    assert topology_and_cost.cost(exp)["source"] == "fabrics.cost model (plan/cost.json unreadable)"
    (tmp_path / "plan" / "cost.json").write_text("{broken")
    with pytest.raises(topology_and_cost.TestbedError, match=r"cost.json is not valid JSON .*: expected the capex"):
        topology_and_cost.cost(exp)


def test_a_report_builds_each_fabric_model_once():
    from fabrics import build_fabric

    first = topology_and_cost._build({"kind": "zcube", "gpus": 32, "gpus_per_switch": 8})
    again = topology_and_cost._build({"gpus_per_switch": 8, "gpus": 32, "kind": "zcube"})  # any key order
    other = topology_and_cost._build({"kind": "roft", "gpus": 32})
    assert again is first and other is not first
    fresh = build_fabric(kind="zcube", gpus=32, gpus_per_switch=8)
    assert first.describe() == fresh.describe() and first.attachment == fresh.attachment
    assert {n: sw.ports for n, sw in first.switches.items()} == {n: sw.ports for n, sw in fresh.switches.items()}
    with pytest.raises(TestbedError):  # a bad parameter still fails as build_fabric says, never from the cache
        topology_and_cost._build({"kind": "mesh", "gpus": 32})
