"""traffic.model.serving: the serving cluster's event machine, driven by hand and by the ideal network."""

import pytest

from traffic.model import breakdown, models, placement, serving
from traffic.model.errors import TrafficError
from traffic.model.serving_spec import ServingSpec
from traffic.model.traces import Request

GLM5 = models.get_model("glm-5")
DENSE = models.get_model("llama-3.1-8b")


def moe_spec(**kw) -> serving.ServingSpec:
    pl = placement.place(32, 8, 8, 0.5)
    base = dict(model=GLM5, prefill=serving.build_engines("prefill", pl.prefill, 16),
                decode=serving.build_engines("decode", pl.decode, 16), bytes_scale=1e4, chunk_bytes=None,
                arrivals="closed", concurrency=32, duration_s=5.0, warmup_s=1.0)
    return ServingSpec(**(base | kw))


def dense_spec(**kw) -> serving.ServingSpec:
    pl = placement.place(16, 8, 8, 0.5)
    base = dict(model=DENSE, prefill=serving.build_engines("prefill", pl.prefill, None),
                decode=serving.build_engines("decode", pl.decode, None), bytes_scale=1.0, chunk_bytes=None,
                prefill_tokens_per_s_per_gpu=1000.0, decode_step_s=0.02, duration_s=10.0)
    return ServingSpec(**(base | kw))


def requests(n: int, tokens_in: int = 1000, tokens_out: int = 20) -> list[Request]:
    return [Request(i, 0.1 * i, tokens_in, tokens_out) for i in range(n)]


def test_build_engines_groups_consecutive_gpus_into_ep_groups_of_single_gpu_units():
    pl = placement.place(32, 8, 8, 0.5)
    engines = serving.build_engines("decode", pl.decode, 8)
    assert [[u.gpus for u in e] for e in engines] == [[(g,) for g in range(17, 25)], [(g,) for g in range(25, 33)]]
    with pytest.raises(TrafficError, match="decode EP size 12 does not divide the 16 decode GPUs"):
        serving.build_engines("decode", pl.decode, 12)


def test_one_request_on_an_idle_dense_cluster_ttft_is_prefill_plus_kv_plus_one_step():
    # 1000 tokens at 8 GPUs x 1000 tokens/s = 0.125 s of prefill (512-token chunks: 0.064 + 0.061);
    # llama-3.1-8b TP8 -> TP8: 8 rank-to-rank transfers of 1000 x 2 x 32 layers x 1 head x 128 x 2 B = 16.384 MB,
    # one per GPU, each at 2 x 100 Gbit/s: 0.65536 ms; then one 20 ms decode step.
    c = serving.run_ideal(serving.Cluster(dense_spec(), [Request(7, 0.0, 1000, 3)]), 100e9)
    r = c.requests[7]
    assert r.prefill_end_s == pytest.approx(0.125)
    assert r.kv_end_s - r.prefill_end_s == pytest.approx(16_384_000 * 8 / 200e9)
    assert r.ttft_s == pytest.approx(0.125 + 16_384_000 * 8 / 200e9 + 0.02)
    assert r.done_s - r.first_token_s == pytest.approx(2 * 0.02)  # 3 tokens: two more steps
    assert {m.kind for m in c.messages.values()} == {"kv"}  # dense: no expert traffic
    assert c.quiet and not serving.Cluster(dense_spec(), [Request(7, 0.0, 1000, 3)]).quiet  # ended / not begun


def test_closed_loop_keeps_concurrency_requests_in_flight_until_the_end():
    spec = moe_spec(concurrency=24, duration_s=3.0)
    c = serving.run_ideal(serving.Cluster(spec, requests(500, 800, 8)), 400e9)
    events = sorted([(r.arrival_s, 1) for r in c.requests.values()] +
                    [(r.done_s, -1) for r in c.requests.values() if r.done_s is not None])
    in_flight = 0
    for t, d in events:
        in_flight += d
        if t < spec.duration_s:
            assert in_flight <= 24
    done = [r for r in c.requests.values() if r.done_s is not None]
    # closed loop: every request finished inside the window was replaced by one more
    assert len(c.requests) == 24 + len([r for r in done if r.done_s < spec.duration_s])


def test_closed_loop_of_one_request_by_hand():
    """One request at a time on the idle dense cluster: each takes 0.125 s prefill + 0.65536 ms KV + 3 decode steps of
    20 ms = 0.18565536 s, and the next arrives as it finishes. In 1 s: 5 finish (the 5th at 0.9283 s) and a 6th
    has arrived and is still in flight."""
    spec = dense_spec(arrivals="closed", concurrency=1, duration_s=1.0, warmup_s=0.0)
    c = serving.run_ideal(serving.Cluster(spec, [Request(i, 0.0, 1000, 3) for i in range(20)]), 100e9)
    one = 0.125 + 16_384_000 * 8 / 200e9 + 3 * 0.02
    rs = list(c.requests.values())
    assert [r.arrival_s for r in rs] == pytest.approx([k * one for k in range(6)])
    assert [r.done_s for r in rs[:5]] == pytest.approx([k * one for k in range(1, 6)]) and rs[5].done_s is None


def test_expert_messages_only_cross_servers_and_nvlink_carries_the_rest():
    c = serving.run_ideal(serving.Cluster(moe_spec(), requests(200, 600, 6)), 400e9)
    ep = [m for m in c.messages.values() if m.kind in ("dispatch", "combine")]
    assert all((m.src_gpu - 1) // 8 != (m.dst_gpu - 1) // 8 for m in ep)
    # every EP message is one a step counted, and the steps' real fabric bytes are the messages' emulated bytes
    # x bytes_scale (1e4), each message rounded to whole emulated bytes
    assert sum(s.messages for s in c.steps) == len(ep) > 0
    assert abs(sum(s.ep_bytes for s in c.steps) / 1e4 - sum(m.bytes for m in ep)) <= len(ep)
    assert sum(s.nvlink_bytes for s in c.steps) > 0  # GLM-5's experts on the same server are reached over NVLink


def test_decode_batch_caps_requests_per_unit_and_step():
    spec = moe_spec(concurrency=200, decode_batch=3)
    c = serving.run_ideal(serving.Cluster(spec, requests(400, 200, 50)), 400e9)
    decode_units = sum(len(e) for e in spec.decode)
    assert max(s.requests for s in c.steps if s.engine.startswith("decode")) <= 3 * decode_units


def test_a_slower_network_lowers_closed_loop_throughput():
    tput = {}
    for bps in (100e9, 400e9):
        c = serving.run_ideal(serving.Cluster(moe_spec(concurrency=256), requests(3000, 200, 60)), bps)
        tput[bps] = c.results()["throughput_tokens_per_s"]
    assert tput[100e9] < tput[400e9]


def test_a_slower_network_raises_ttft_at_the_same_arrivals():
    ttft = {}
    for bps in (100e9, 400e9):
        spec = moe_spec(arrivals="trace", duration_s=4.0)
        reqs = [Request(i, 0.02 * i, 200, 30) for i in range(200)]
        res = serving.run_ideal(serving.Cluster(spec, reqs), bps).results()
        ttft[bps] = sorted(res["ttft_s"])[len(res["ttft_s"]) // 2]
    assert ttft[100e9] > ttft[400e9]


def test_a_step_ends_when_its_slowest_message_arrives():
    c = serving.Cluster(moe_spec(concurrency=16), requests(100, 300, 5))
    pending: list[serving.Message] = []
    timers: list[serving.Timer] = []

    def take(actions):
        for a in actions:
            (pending.append(a.message) if isinstance(a, serving.Send) else timers.append(a))

    take(c.start(0.0))
    now = 0.0
    while not any(s.engine.startswith("decode") and s.dispatch_end_s for s in c.steps):
        if pending:
            m = pending.pop(0)
            now += 0.001
            take(c.delivered(m.id, now))
        else:
            t = min(timers, key=lambda x: x.at)
            timers.remove(t)
            now = max(now, t.at)
            take(c.timer(t.key, now))
    step = next(s for s in c.steps if s.engine.startswith("decode") and s.dispatch_end_s)
    assert step.dispatch_end_s == pytest.approx(now)  # the last of its dispatch messages closed the phase
    assert step.end_s is None  # the combine messages are still out


def test_nothing_starts_after_the_end():
    spec = moe_spec(duration_s=2.0, warmup_s=0.5)
    c = serving.run_ideal(serving.Cluster(spec, requests(300, 400, 40)), 400e9)
    assert all(s.start_s <= spec.duration_s for s in c.steps)
    assert all(r.arrival_s <= spec.duration_s for r in c.requests.values())


@pytest.mark.parametrize("kw, text", [
    (dict(warmup_s=5.0, duration_s=5.0), "warmup 5 s is not shorter than the duration 5 s"),
    (dict(arrivals="poisson"), "arrivals"),
    (dict(decode_batch=0), "decode_batch"),
])
def test_bad_settings_name_the_value(kw, text):
    with pytest.raises(TrafficError, match=text):
        moe_spec(**kw)


# ------------------------------------------------------------ TTFT's parts
GLM5_KV_PER_TOKEN = 78 * (512 + 64) * 2  # MLA latent + rope, bf16, every layer: 89,856 B


def layout_spec(name: str, n: int, **kw) -> serving.ServingSpec:
    e = placement.layout_engines(name, n)
    base = dict(model=GLM5, prefill=e["prefill"], decode=e["decode"], bytes_scale=1.0, chunk_bytes=None,
                prefill_chunk_tokens=8192, arrivals="trace", duration_s=10.0)
    return ServingSpec(**(base | kw))


def test_one_request_on_an_idle_single_node_cluster_takes_prefill_kv_and_one_step():
    # one TP8 prefill instance: 1000 tokens at 8 x 5000 tokens/s = 25 ms; KV 1000 x 89,856 B from prefill
    # rank 0 (GPU 1) to decode GPU 9 at 2 x 100 Gbit/s = 3.59424 ms; decode EP8 inside server 2 (NVLink, not
    # on the fabric): one 30 ms step, no exchange
    c = serving.run_ideal(serving.Cluster(layout_spec("single-node", 16), [Request(7, 0.0, 1000, 3)]), 100e9)
    r = c.requests[7]
    kv = 1000 * GLM5_KV_PER_TOKEN * 8 / 200e9
    assert r.parts() == pytest.approx({"decode_memory": 0.0,
                                       "prefill_queue": 0.0, "prefill_compute": 0.025, "prefill_exchange": 0.0,
                                       "kv_transfer": kv, "decode_wait": 0.0, "decode_compute": 0.030,
                                       "decode_exchange": 0.0}, abs=1e-12)
    assert r.ttft_s == pytest.approx(0.025 + 0.00359424 + 0.030, abs=1e-12)


def test_a_request_left_out_of_a_full_step_waits_in_the_queue_and_behind_a_decode_step():
    # chunks of 4096 tokens: A (8192 tokens, t=0) takes steps 1 and 2 (0.1024 s each); B (1000 tokens) arrives
    # at 0.1, is left out of step 2 (A's 4096 fill it) and is prefilled in step 3, 0.2048..0.2298 s.
    # Both KV transfers leave prefill rank 0 (GPU 1): A's (736.1 MB, 29.444 ms) from 0.2048, so B's (3.594 ms)
    # waits for the NIC and arrives at 0.23784; A's first decode step runs 0.23424..0.26424, so B waits
    # 26.4 ms for the next one and has its first token at 0.29424.
    spec = layout_spec("single-node", 16, prefill_chunk_tokens=4096)
    c = serving.run_ideal(serving.Cluster(spec, [Request(1, 0.0, 8192, 5), Request(2, 0.1, 1000, 5)]), 100e9)
    a, b = c.requests[1], c.requests[2]
    kv_a = 8192 * GLM5_KV_PER_TOKEN * 8 / 200e9
    assert a.parts() == pytest.approx({"decode_memory": 0.0,
                                       "prefill_queue": 0.0, "prefill_compute": 0.2048, "prefill_exchange": 0.0,
                                       "kv_transfer": kv_a, "decode_wait": 0.0, "decode_compute": 0.030,
                                       "decode_exchange": 0.0}, abs=1e-9)
    kv_end_b = 0.2048 + kv_a + 1000 * GLM5_KV_PER_TOKEN * 8 / 200e9
    a_step_end = 0.2048 + kv_a + 0.030
    assert b.parts() == pytest.approx({"decode_memory": 0.0,
                                       "prefill_queue": 0.1048, "prefill_compute": 0.025, "prefill_exchange": 0.0,
                                       "kv_transfer": kv_end_b - 0.2298, "decode_wait": a_step_end - kv_end_b,
                                       "decode_compute": 0.030, "decode_exchange": 0.0}, abs=1e-9)
    assert b.ttft_s == pytest.approx(0.2048 + kv_a + 0.060 - 0.1, abs=1e-9)


@pytest.mark.parametrize("layout", list(placement.SERVING_LAYOUTS))
def test_the_parts_add_up_to_the_ttft_of_every_request_of_an_ideal_run(layout):
    spec = layout_spec(layout, 32, arrivals="closed", concurrency=64, duration_s=4.0, warmup_s=1.0,
                       bytes_scale=1e4, prefill_chunk_tokens=512)
    reqs = [Request(i, 0.0, 200 + 97 * (i % 23), 5 + i % 40) for i in range(3000)]
    c = serving.run_ideal(serving.Cluster(spec, reqs), 200e9)
    served = [r for r in c.requests.values() if r.first_token_s is not None]
    assert len(served) > 64
    for r in served:
        assert sum(r.parts().values()) == pytest.approx(r.ttft_s, abs=1e-9), r.id
    if spec.prefill[0][0].tp == 1:  # an EP prefill group: its steps wait for the all-to-all
        assert max(r.prefill_exchange_s for r in served) > 0
    else:  # one TP instance per server: no prefill all-to-all on the fabric
        assert all(r.prefill_exchange_s == 0 for r in served)


def test_the_breakdown_names_the_p50_and_p99_request_and_the_tail():
    rows = [{"request_id": i, "arrival_s": 1.0 + i, "first_token_s": 1.0 + i + t,
             **{f"{k}_s": t / 7 for k in serving.TTFT_PARTS}} for i, t in enumerate((0.4, 0.1, 0.3, 0.2))]
    rows.append({"request_id": 9, "arrival_s": 0.5, "first_token_s": 9.0,  # arrived in the warm-up
                 **{f"{k}_s": 1.0 for k in serving.TTFT_PARTS}})
    got = breakdown.ttft_breakdown(rows, warmup_s=1.0, end_s=10.0)
    assert got["requests"] == 4
    assert (got["p50"]["request_id"], got["p50"]["ttft"]) == ("3", 200.0)  # 2nd of 4 (nearest rank)
    assert (got["p99"]["request_id"], got["p99"]["ttft"]) == ("0", 400.0)  # 4th of 4: the slowest
    assert got["tail_mean"]["requests"] == 1 and got["p99"]["kv_transfer"] == pytest.approx(400 / 7, abs=1e-3)
    text = [{k: "" if v is None else str(v) for k, v in r.items()} for r in rows]  # as read from requests.csv
    assert breakdown.ttft_breakdown(text, 1.0, 10.0)["p99"] == got["p99"]


def test_the_decode_step_breakdown_splits_compute_dispatch_and_combine():
    def step(k, total, dispatch, last):
        return {"engine": "decode0", "step": k, "start_s": k, "compute_end_s": k + 0.03,
                "dispatch_end_s": k + 0.03 + dispatch, "end_s": k + total, "dispatch_last_id": last,
                "combine_last_id": ""}
    rows = [step(1, 0.040, 0.004, 11), step(2, 0.050, 0.012, 12), step(3, 0.035, 0.001, 13),
            {"engine": "prefill0", "step": 1, "start_s": 1, "compute_end_s": 1.1, "dispatch_end_s": 1.2,
             "end_s": 1.3}]
    ports = {11: ("gpu17:p1", "gpu25:p2"), 12: ("gpu17:p1", "gpu25:p2"), 13: ("gpu18:p2", "gpu26:p1")}
    got = breakdown.decode_step_breakdown(rows, 0.0, 10.0, ports)
    assert got["steps"] == 3
    assert got["p50"] == {"engine": "decode0", "step": 1, "total": 40.0, "compute": 30.0, "dispatch": 4.0,
                          "combine": 6.0}
    assert got["p99"]["step"] == 2 and got["p99"]["dispatch"] == 12.0
    assert got["mean"] == {"total": 41.667, "compute": 30.0, "dispatch": 5.667, "combine": 6.0}
    assert got["slowest"]["dispatch"]["pairs"][0] == {"src": "gpu17:p1", "dst": "gpu25:p2", "steps": 2}
    assert got["slowest"]["combine"]["steps"] == 0
