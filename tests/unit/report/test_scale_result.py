"""testbed.report.scale_result: the shipped run at the seed's scale, extracted from a run directory and shown
beside a run's headline (page and terminal); the congestion section of a live run."""

import json

from testbed.report import build_report, congestion_section, headline_lines, scale_result
from testbed.report.load import load_experiment
from tests.support.report_fixture import write_live_experiment


def test_a_scale_result_is_extracted_shipped_and_shown_beside_the_run(tmp_path):
    scale_run = write_live_experiment(tmp_path / "scale", reps=2)
    build_report(scale_run)
    doc = scale_result.extract(scale_run)
    assert doc["gpus"] == 16 and doc["repetitions"] == 2 and set(doc["headline"]["figures"]) >= {
        "throughput_tokens_per_s", "ttft_ms.p99"}
    run = write_live_experiment(tmp_path / "run", reps=2)
    (run / scale_result.FILE).write_text(json.dumps(doc))
    page = build_report(run).read_text()
    assert "At the seed&#x27;s scale" in page or "At the seed's scale" in page
    text = "\n".join(headline_lines(run))
    assert "at the seed's scale (16 GPUs" in text and "Output tokens/s: ZCube / ROFT" in text
    ratio = doc["headline"]["figures"]["throughput_tokens_per_s"]["ratio"]
    assert f"{ratio:.4g}" in text


def test_the_congestion_section_shows_every_class_of_both_fabrics(tmp_path):
    run = write_live_experiment(tmp_path / "run", reps=1)
    exp = load_experiment(run)
    for f in exp.fabrics:  # the fixture writes no congestion records: give each repetition one by hand
        for r in exp.reps[f]:
            r.summary["congestion"] = {"by_class": {c: {"congested_s": 1.0 if f == "roft" else 0.5, "paused_s": 0.0,
                                                        "backlog_mean_bytes": 10.0, "backlog_max_bytes": 100}
                                                    for c in ("switch_to_gpu", "gpu_to_switch", "switch_to_switch")},
                                       "kv_by_nic": {"server1": {"ports": {"gpu1:p1": 2e9, "gpu1:p2": 0},
                                                                 "bytes": 2e9, "max_over_mean": 2.0}}}
    html = congestion_section.section(exp)
    assert html.count("switch -&gt; switch") >= 2 and "gpu1:p1 2 GB" in html and "ROFT has more" in html


def test_a_scale_result_says_how_it_was_made_and_keeps_another_engines_beside_it(tmp_path):
    scale_run = write_live_experiment(tmp_path / "scale", reps=2)
    build_report(scale_run)
    earlier = tmp_path / "earlier.json"
    assert scale_result.main([str(scale_run), str(earlier)]) == 0
    out = tmp_path / "scale_result.json"
    assert scale_result.main([str(scale_run), str(out), "--how", "python -m testbed run X", "--check",
                              str(earlier)]) == 0
    doc = json.loads(out.read_text())
    assert doc["how"] == "python -m testbed run X" and doc["check"]["headline"] == doc["headline"]
    assert "check" not in doc["check"]  # one level: the check's own check is not carried
    text = scale_result.lines(doc)
    assert sum(1 for line in text if "at the seed's scale" in line) == 2 and text[len(text) // 2].startswith(
        "  the check, at the seed's scale")


def test_the_scale_section_shows_both_engines_ep_tails_and_where_the_figures_come_from():
    tail = {"messages": 1000, "fct_ms": {"p50": 1.5, "p99": 7.2}, "slowest_from_rank0": 0.53, "all_from_rank0": 0.13,
            "rank0_held_by": [["sw17:49", 271]]}
    doc = {"gpus": 512, "backend": "fluid", "dir": "RUN", "commit": "abc", "ep_tail": {"zcube": tail, "roft": None},
           "check": {"backend": "ns3", "ep_tail": {"zcube": tail}, "ep_tail_source": "the lossless twin, ZCube only"}}
    html = scale_result.section(doc, None)
    assert "The expert-parallel tail there (repetition 1" in html and html.count("rank 0: 53% (of all: 13%)") == 2
    assert "The check's (the lossless twin, ZCube only): ZCube: EP message FCT P50 1.50 ms" in html
    assert "rank-0 NICs paused by sw17:49 x271" in html and "shipped RUN at commit abc" in html
    live = doc | {"shown": "live", "why": "computed by this run in 90 s"}
    assert scale_result.lines(live)[0].endswith("LIVE: computed by this run in 90 s, RUN):")
