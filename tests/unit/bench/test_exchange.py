"""bench exchange's plan and figures, without a fabric."""

from fabrics import build_fabric
from testbed.bench import exchange as ex
from traffic.model.serving import Message


def _m(i, src, dst, nbytes, engine="decode0", step=10, kind="dispatch"):
    return Message(i, kind, src, dst, nbytes, nbytes * 1000, None, engine, step)


ZCUBE = build_fabric("zcube", gpus=32, gpus_per_switch=8)  # striped pairs cross 3 links: NIC, switch, switch


def test_sample_takes_the_second_half_of_each_engines_steps():
    phases = {("decode0", s, k): [_m(s, 1, 17, 10)] for s in range(1, 41) for k in ("dispatch", "combine")}
    phases |= {("prefill0", s, k): [_m(s, 1, 9, 10)] for s in range(1, 11) for k in ("dispatch", "combine")}
    keys = ex.sample(phases)
    decode = [k for k in keys if k[0] == "decode0"]
    prefill = [k for k in keys if k[0] == "prefill0"]
    assert len(decode) == 2 * ex.SAMPLE["decode"] and min(k[1] for k in decode) == 21
    assert {k[1] for k in prefill} == {6, 7, 8, 9, 10}  # only 5 steps past the half: all of them


def test_plan_spaces_exchanges_and_alternates_a_pairs_ports():
    phases = {("decode0", 30, "dispatch"): [_m(1, 1, 17, 3000), _m(2, 1, 17, 3000), _m(3, 2, 18, 100)],
              ("decode0", 31, "dispatch"): [_m(4, 1, 17, 50)]}
    rows, of = ex.plan(phases, list(phases), "striped", 3e6, 3000, ZCUBE)
    assert [r["start"] for r in rows] == [ex.LEAD_S] * 3 + [ex.LEAD_S + ex.GAP_S]
    assert [(r["src_ip"], r["dst_ip"]) for r in rows[:2]] == [("10.1.0.1", "10.2.0.17"), ("10.2.0.1", "10.1.0.17")]
    assert of == {0: ("decode0", 30, "dispatch"), 1: ("decode0", 30, "dispatch"), 2: ("decode0", 30, "dispatch"),
                  3: ("decode0", 31, "dispatch")}


def test_a_long_exchange_gets_three_ideals_of_room():
    big = {("prefill0", 9, "combine"): [_m(1, 1, 9, 600_000)], ("prefill0", 10, "combine"): [_m(2, 1, 9, 10)]}
    rows, _ = ex.plan(big, list(big), "rail-out", 3e6, 3000, ZCUBE)
    # 600,000 B + 204 headers x 90 B = 618,360 B from one GPU at 2 x 3 Mbit/s: 0.82448 s; plus 2 x 3,090 B
    # store-and-forward at 3 Mbit/s: 16.48 ms; x 3
    assert abs(rows[1]["start"] - (ex.LEAD_S + 3 * (0.82448 + 0.01648))) < 1e-3


def _row(i, src, dst, nbytes, order, start, end, verified=True):
    return {"id": i, "src": src, "dst": dst, "bytes": nbytes, "scheduled_start": order, "start": start,
            "end": end, "verified": verified, "src_ip": f"10.1.0.{src[3:]}", "dst_ip": f"10.2.0.{dst[3:]}"}


def test_ratios_from_the_order_and_from_the_first_send():
    # one 2,948 B message (one packet + 90 B of headers = 3,038 B): ideal 3,038 x 8 / 6e6 + 2 x 3,038 x 8 / 3e6
    ideal = 3038 * 8 / 6e6 + 2 * 3038 * 8 / 3e6
    rows = [_row(0, "gpu1", "gpu17", 2948, 1.0, 1.0 + ideal, 1.0 + 3 * ideal)]
    got, = ex.ratios(rows, {0: ("decode0", 5, "dispatch")}, 3e6, 3000, ZCUBE)
    assert got["vs_ideal_from_order"] == 3.0 and got["vs_ideal_from_first_send"] == 2.0
    assert abs(got["ideal_ms"] - ideal * 1e3) < 1e-3


def test_an_unverified_message_fails_the_goal():
    per = [{"engine": "decode0", "phase": "dispatch", "ideal_ms": 10.0, "verified": True, "vs_ideal_from_order": 1.0,
            "vs_ideal_from_first_send": 0.9},
           {"engine": "decode0", "phase": "dispatch", "ideal_ms": 10.0, "verified": False, "vs_ideal_from_order": None,
            "vs_ideal_from_first_send": None}]
    doc = ex.summarize("zcube", per, {"model": "glm-5", "concurrency": 128})
    assert doc["median_from_order"] == 1.0 and doc["unverified"] == 1 and doc["goal_met"] is False
    assert "MISSED" in ex.table(doc)[-1]
    ok = ex.summarize("zcube", per[:1], {"model": "glm-5", "concurrency": 128})
    assert ok["goal_met"] is True and ok["groups"]["decode dispatch"]["from_order"]["n"] == 1


def test_ideal_phases_are_the_serving_loops_expert_exchanges_by_engine_step_and_kind():
    from common.paths import AZURE_TRACE
    from testbed.repetition.drivers.live import prepare_live
    from tests.support.settings import repetition

    spec = repetition({"trace": {"path": str(AZURE_TRACE), "duration_s": 2}, "link": {"time_dilation": 4},
                       "gpus": 16, "gpus_per_switch": 4, "gpus_per_server": 4,
                       "serving": {"driver": "live", "arrivals": "closed", "concurrency": 8, "model": "glm-5"}})
    phases = ex.ideal_phases(prepare_live(spec, 16, 3e6), 400e9)
    assert phases and {k[2] for k in phases} == {"dispatch", "combine"}  # MoE: no KV transfer among them
    for (engine, step, kind), messages in phases.items():
        assert all((m.engine, m.step, m.kind) == (engine, step, kind) for m in messages)
