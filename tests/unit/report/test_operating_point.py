"""The report's serving operating point (issue 15, section 1): per-instance utilization and queue
from instances.csv / queue.csv, the prefill-queue figure, and the red "overloaded" banner that
says TTFT measures the prefill queue, not the network. On synthetic run directories whose
operating-point files come from the replay's own writer (tests.support.report_fixture.operating_point)."""

from __future__ import annotations

import json
import re

import pytest

from common.errors import TestbedError
from testbed.report import build_report, plots, verdict
from testbed.report.build import summarize
from testbed.report.load import load_experiment
from tests.support.report_fixture import operating_point, write_experiment
from traffic.model.schedule import OVERLOAD_MESSAGE

OVERLOAD_BANNER = '<div class="banner overload"'


def _both(reps: int = 1, **opts) -> dict:
    return {(f, k): dict(opts) for f in ("zcube", "roft") for k in range(1, reps + 1)}


def _section(text: str, sid: str) -> str:
    start = text.index(f'<section id="{sid}">')
    return text[start:text.index("</section>", start)]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    run = write_experiment(tmp_path_factory.mktemp("op") / "healthy", reps=2)
    return run, build_report(run).read_text(), json.loads((run / "summary.json").read_text())


@pytest.fixture(scope="module")
def overloaded(tmp_path_factory):
    run = write_experiment(tmp_path_factory.mktemp("op") / "over", reps=1, rep_options=_both(overloaded=True))
    return run, build_report(run).read_text(), json.loads((run / "summary.json").read_text())


def test_fixture_operating_points_are_what_they_claim():
    ok, flag = operating_point(False)
    assert flag is None and all(0.7 <= i.utilization <= 0.8 for i in ok.instances if i.kind == "prefill")
    over, flag = operating_point(True)
    assert flag.startswith(OVERLOAD_MESSAGE) and all(i.offered_load > 1 for i in over.instances if i.kind == "prefill")


def test_section_sits_between_the_headline_table_and_the_seed_comparison(healthy):
    _, text, _ = healthy
    head, op, seed = (text.index(f'<section id="{s}">') for s in ("headline", "operating", "seed"))
    assert head < op < seed
    assert text.index("KV-transfer FCT P99") < op < text.index("seed figure (production)")
    assert '<a href="#operating">Operating point</a>' in text
    assert "Against the seed" not in _section(text, "headline")


def test_section_shows_each_instance_from_instances_csv(healthy):
    run, text, _ = healthy
    section = _section(text, "operating")
    assert "Prefill keeps up" in section and "0.74-0.75" in section
    for f in ("zcube", "roft"):
        rows = [line.split(",") for line in (run / "runs" / f / "rep1" / "instances.csv").read_text().split()[1:]]
        assert len(rows) == 4
        for inst, kind, util, *_ in rows:
            cells = re.escape(f'<td class="l">{kind}</td><td class="">{inst}</td><td class="">{float(util):.2f}</td>')
            assert re.search(cells, section), (f, kind, inst)
    assert section.count("<table") == 2  # one per fabric
    assert "the other repetitions are identical" in section
    assert 'class="bad"' not in section  # nothing saturated


def test_prefill_queue_figure_is_embedded_once(healthy):
    run, text, _ = healthy
    png = run / "figures" / "prefill_queue.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    section = _section(text, "operating")
    assert section.count('src="data:image/png;base64,') == 1 and 'alt="prefill queue over time"' in section
    caption = section[section.index("<figcaption>"):section.index("</figcaption>")]
    assert "queue.csv of ZCube rep1" in caption and "Drawn once" in caption
    assert "ROFT: identical queue.csv" in caption


def test_figure_draws_a_line_per_prefill_instance(tmp_path, monkeypatch):
    run = write_experiment(tmp_path / "lines", rep_options={("roft", 1): {"overloaded": True}})
    drawn = {}

    def keep(fig, path):
        drawn["labels"] = [line.get_label() for line in fig.axes[0].lines if not line.get_label().startswith("_")]
        drawn["title"] = fig.axes[0].get_title(loc="left")
        drawn["ylim"] = fig.axes[0].get_ylim()[1]
        return real(fig, path)

    real = plots.save
    monkeypatch.setattr(plots, "save", keep)
    assert plots.prefill_queue(load_experiment(run), tmp_path / "q.png").is_file()
    assert drawn["labels"][:2] == ["prefill 0: utilization 0.75, offered load 0.75",
                                   "prefill 1: utilization 0.74, offered load 0.75"]
    # ROFT's schedule differs here (overloaded), so it is drawn too, dashed, and said to differ
    assert drawn["labels"][2:] == ["ROFT prefill 0 (differs)", "ROFT prefill 1 (differs)"]
    assert drawn["title"].startswith("Prefill queue over time: ROFT flagged overloaded (ZCube rep1")
    assert drawn["ylim"] >= 8  # ROFT's queue (up to 8) is not cut off by ZCube's scale (up to 1)
    src = plots.serving_queue_source(load_experiment(run))
    assert (src["fabric"], src["same"], src["differ"]) == ("zcube", [], ["roft"])


@pytest.mark.parametrize("over,title", [(False, "bounded, prefill keeps up"),
                                        (True, "it keeps growing, the replay flagged the cluster overloaded")])
def test_figure_title_says_whether_the_queue_grows(tmp_path, monkeypatch, over, title):
    run = write_experiment(tmp_path / "t", rep_options=_both(overloaded=over))
    seen = []
    real = plots.save
    monkeypatch.setattr(plots, "save", lambda fig, path: (seen.append(fig.axes[0].get_title(loc="left")),
                                                          real(fig, path))[1])
    plots.prefill_queue(load_experiment(run), tmp_path / "q.png")
    assert seen == [f"Prefill queue over time: {title} (ZCube rep1, dotted: first / last third mean)"]


def test_healthy_run_has_no_overload_banner(healthy):
    _, text, doc = healthy
    assert OVERLOAD_BANNER not in text and verdict.OVERLOADED not in text
    assert doc["overloaded"] is False
    for f in ("zcube", "roft"):
        op = doc[f]["operating_point"]
        assert op["overloaded"] is False and op["warning"] is None and op["overloaded_reps"] == []
        assert op["prefill_utilization"] == {"0": 0.75, "1": 0.7375}
        assert op["decode_utilization"] == {"0": 0.9625, "1": 0.9125}
        assert op["prefill_offered_load"] == {"0": 0.75, "1": 0.75}
    assert "overloaded" not in doc["verdict"]


def test_summary_utilization_is_the_replays(healthy):
    run, _, doc = healthy
    replay = json.loads((run / "runs" / "roft" / "rep1" / "summary.json").read_text())
    assert doc["roft"]["operating_point"]["prefill_utilization"] == replay["prefill_utilization"]


def test_overloaded_banner_at_the_top_with_the_numbers(overloaded):
    _, text, doc = overloaded
    at = text.find(OVERLOAD_BANNER)
    assert 0 <= at < text.find("<h1>")
    banner = text[at:text.index("</div>", at)]
    assert "The cluster is overloaded; TTFT measures the prefill queue, not the network." in banner
    assert "every replay: prefill 0: utilization 1.00, offered load 1.60, queue 2.0 -&gt; 7.7 requests" in banner
    assert "Prefill utilization up to 1.00" in banner and "offered load up to 1.60" in banner
    assert re.search(r"TTFT proxy P99 1 s, of which the KV-transfer FCT P99 is at most \d+\.\d%", banner)
    assert '<a href="#operating">' in banner
    # an operating problem, not an emulator one: fidelity still passes, and says so below the red banner
    assert doc["fidelity_ok"] is True and text.find('<div class="okbar">') > at


def test_overloaded_section_summary_and_verdict(overloaded):
    _, text, doc = overloaded
    section = _section(text, "operating")
    assert '<p class="fail">The cluster is overloaded; TTFT measures the prefill queue, not the network' in section
    assert section.count('class="bad"') == 2 * 2 * 2  # utilization and offered load of 2 prefill rows x 2 fabrics
    assert "it keeps growing" not in section  # the title is in the PNG, not the page
    assert doc["overloaded"] is True
    for f in ("zcube", "roft"):
        op = doc[f]["operating_point"]
        assert op["overloaded"] is True and op["overloaded_reps"] == [1]
        assert op["warning"].startswith(OVERLOAD_MESSAGE)
        assert op["prefill_utilization"] == {"0": 1.0, "1": 0.975}
    assert doc["verdict"].endswith("the cluster is overloaded, so TTFT measures the prefill queue, not the network")
    ttft = next(c for c in doc["seed_comparison"] if c["figure"] == "ttft_ms.p99")
    assert verdict.OVERLOADED in ttft["sentence"]


def test_banner_names_only_the_overloaded_replays(tmp_path):
    run = write_experiment(tmp_path / "one", reps=2, rep_options={("roft", 2): {"overloaded": True}})
    text = build_report(run).read_text()
    doc = json.loads((run / "summary.json").read_text())
    assert doc["overloaded"] is True
    assert doc["zcube"]["operating_point"]["overloaded"] is False
    assert doc["roft"]["operating_point"]["overloaded"] is True
    assert doc["roft"]["operating_point"]["overloaded_reps"] == [2]
    banner = text[text.index(OVERLOAD_BANNER):]
    assert "<li>ROFT rep2: prefill 0: utilization 1.00" in banner[:banner.index("</div>")]
    section = _section(text, "operating")
    # ROFT's repetitions differ and the table is short: both listed, with a rep column
    assert "every repetition" in section and '<th class="l">rep</th>' in section


def test_old_runs_without_the_files_still_build(tmp_path):
    run = write_experiment(tmp_path / "old", rep_options=_both(serving=False))
    text = build_report(run).read_text()
    doc = json.loads((run / "summary.json").read_text())
    assert doc["overloaded"] is None
    for f in ("zcube", "roft"):
        assert doc[f]["operating_point"] == {"prefill_utilization": {}, "decode_utilization": {},
                                             "prefill_offered_load": {}, "overloaded": None, "overloaded_reps": [],
                                             "warning": None, "recorded_reps": []}
    section = _section(text, "operating")
    assert "Not recorded" in section and "<table" not in section and "<img" not in section
    assert OVERLOAD_BANNER not in text
    assert not (run / "figures" / "prefill_queue.png").exists()
    assert "zcube rep1: instances.csv and queue.csv missing" in " ".join(doc["notes"])
    assert "instances.csv and queue.csv missing" in _section(text, "fidelity")


def test_an_old_run_with_the_overload_warning_still_gets_the_banner(tmp_path):
    run = write_experiment(tmp_path / "oldover", rep_options=_both(serving=False, overloaded=True))
    text = build_report(run).read_text()
    doc = json.loads((run / "summary.json").read_text())
    assert doc["overloaded"] is True and OVERLOAD_BANNER in text
    assert doc["zcube"]["operating_point"]["prefill_utilization"] == {}


def test_one_fabric_without_the_files(tmp_path):
    run = write_experiment(tmp_path / "mixed", rep_options={("zcube", 1): {"serving": False}})
    text = build_report(run).read_text()
    section = _section(text, "operating")
    assert "Prefill keeps up" in section and "ZCube: not recorded" in section
    assert section.count("<table") == 1
    caption = section[section.index("<figcaption>"):section.index("</figcaption>")]
    assert "queue.csv of ROFT rep1" in caption and "ZCube recorded none" in caption


def test_utilization_falls_back_to_instances_csv(tmp_path):
    run = write_experiment(tmp_path / "nosum")
    path = run / "runs" / "zcube" / "rep1" / "summary.json"
    s = json.loads(path.read_text())
    del s["prefill_utilization"], s["decode_utilization"]
    path.write_text(json.dumps(s))
    doc = summarize(load_experiment(run))
    assert doc["zcube"]["operating_point"]["prefill_utilization"] == {"0": 0.75, "1": 0.7375}
    assert doc["zcube"]["operating_point"]["overloaded"] is False


def test_bad_operating_point_files(tmp_path):
    run = write_experiment(tmp_path / "bad")
    rep = run / "runs" / "roft" / "rep1"
    (rep / "queue.csv").write_text("")  # the replay writes an empty file when it has no row
    assert load_experiment(run).reps["roft"][0].serving_queue is None
    (rep / "instances.csv").write_text("instance,kind,utilization\n0,prefill,0.5\n")
    with pytest.raises(TestbedError, match=re.escape(str(rep / "instances.csv")) + ".*offered_load"):
        load_experiment(run)
    (rep / "instances.csv").write_text("instance,kind,utilization,offered_load,mean_queue,max_queue\n"
                                       "x,prefill,0.5,0.5,1,2\n")
    with pytest.raises(TestbedError, match=re.escape(str(rep / "instances.csv")) + ":2: instance 'x'"):
        load_experiment(run)
