"""testbed.report.port_classes: the medians by port class and the one sentence naming where the
ZCube-vs-ROFT difference in congestion is."""

from testbed.report import port_classes as C


def _rep(congested: dict, backlog: float = 0.0) -> dict:
    return {"congestion": {"by_class": {c: {"congested_s": congested.get(c, 0.0), "paused_s": 0.0,
                                            "backlog_mean_bytes": backlog, "backlog_max_bytes": 0}
                                        for c in C.CLASSES}}}


def test_the_sentence_names_the_class_whose_congested_time_differs_most():
    sums = {"zcube": [_rep({"switch_to_switch": 0.5, "switch_to_gpu": 1.0}), _rep({"switch_to_switch": 0.7})],
            "roft": [_rep({"switch_to_switch": 2.0, "switch_to_gpu": 1.1}), _rep({"switch_to_switch": 3.0})]}
    med = C.per_fabric(sums)
    assert med["zcube"]["switch_to_switch"]["congested_s"] == 0.6
    assert med["roft"]["switch_to_gpu"]["congested_s"] == 0.55
    text = C.sentence(sums)
    assert text.startswith("The difference in congestion comes from switch -> switch ports (avoidable")
    assert "ROFT has more there, ZCube 0.6 vs ROFT 2.5 s congested" in text


def test_without_pauses_the_backlog_decides_and_no_congestion_says_so():
    assert "B of mean backlog" in C.sentence({"zcube": [_rep({}, 10.0)], "roft": [_rep({}, 50.0)]})
    assert C.sentence({"zcube": [_rep({})], "roft": [_rep({})]}).startswith("Neither fabric's queues congested")
    assert C.sentence({"zcube": [_rep({})]}) is None and C.per_fabric({"zcube": [{}]}) == {}
