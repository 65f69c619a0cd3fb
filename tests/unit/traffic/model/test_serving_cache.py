"""traffic.model.serving with prefix caches, KV memory and sessions: values worked out by hand, and the
features off giving exactly what the defaults give."""

from __future__ import annotations

import dataclasses

import pytest

from common.paths import TRACES_DIR
from traffic.model import models, placement, serving
from traffic.model.errors import TrafficError
from traffic.model.traces import Request, read_trace

GLM5 = models.get_model("glm-5")
DENSE = models.get_model("llama-3.1-8b")
GLM5_BF16 = 78 * (512 + 64) * 2  # 89,856 B a token
DENSE_PER_RANK = 2 * 32 * 128 * 2  # llama-3.1-8b, TP8: one kv head a rank, 16,384 B a token


def layout_spec(name: str, n: int, **kw) -> serving.ServingSpec:
    e = placement.layout_engines(name, n)
    base = dict(model=GLM5, prefill=e["prefill"], decode=e["decode"], bytes_scale=1.0, chunk_bytes=None,
                prefill_chunk_tokens=8192, arrivals="trace", duration_s=10.0)
    return serving.ServingSpec(**(base | kw))


def dense_spec(**kw) -> serving.ServingSpec:
    pl = placement.place(16, 8, 8, 0.5)
    base = dict(model=DENSE, prefill=serving.build_engines("prefill", pl.prefill, None),
                decode=serving.build_engines("decode", pl.decode, None), bytes_scale=1.0, chunk_bytes=None,
                prefill_tokens_per_s_per_gpu=1000.0, decode_step_s=0.02, duration_s=10.0)
    return serving.ServingSpec(**(base | kw))


def kv_s(tokens: int, per_rank: int = DENSE_PER_RANK) -> float:
    """A TP8 -> TP8 dense transfer: each of 8 GPUs sends its rank's share at 2 x 100 Gbit/s."""
    return tokens * per_rank * 8 / 200e9


# ------------------------------------------------------------ nothing changes with the features off
OFF = dict(prefix_cache=False, prefix_hit=None, prefill_routing="least-loaded", decode_prefix_cache=False,
           decode_memory=False, think_s=0.0)


def default_experiment_spec(**kw) -> serving.ServingSpec:
    """experiments/default.yaml's cluster (glm5-recipe on 32 GPUs, closed loop of 128, 8192-token chunks,
    30 ms decode steps, bf16 KV), shortened to 6 cluster seconds."""
    e = placement.layout_engines("glm5-recipe", 32)
    base = dict(model=GLM5, prefill=e["prefill"], decode=e["decode"], dtype="bf16", bytes_scale=3e3,
                chunk_bytes=65_536, prefill_chunk_tokens=8192, decode_step_s=0.030, arrivals="closed",
                concurrency=128, duration_s=6.0, warmup_s=1.0, seed=0)
    return serving.ServingSpec(**(base | kw))


@pytest.mark.parametrize("trace", ["azure2023_conv.csv.gz", "mooncake_conversation.jsonl.gz"])
def test_the_new_features_explicitly_off_give_the_default_rows_exactly(trace):
    reqs = read_trace(TRACES_DIR / trace).requests[:3000]
    rows = [Request.from_row(r.to_row()) for r in reqs]  # through the JSON rows, as the coordinator reads them
    runs = {}
    for name, spec in (("defaults", default_experiment_spec()), ("off", default_experiment_spec(**OFF))):
        c = serving.run_ideal(serving.Cluster(spec, rows if name == "defaults" else reqs), 200e9)
        runs[name] = (c.request_rows(), c.step_rows(), c.results()["throughput_tokens_per_s"])
    assert runs["defaults"] == runs["off"]
    request_rows = runs["defaults"][0]
    assert len(request_rows) > 128 and all(r["cached_tokens"] == 0 and r["decode_memory_s"] in (0.0, None)
                                           for r in request_rows)
    assert all(r["kv_tokens"] == r["input_tokens"] for r in request_rows if r["kv_end_s"] is not None)


# ------------------------------------------------------------ the prefill's prefix cache
def test_a_fully_cached_request_computes_one_token_and_still_moves_its_whole_kv():
    # single-node: one TP8 prefill instance (8 x 5000 tokens/s), decode EP8 in server 2. A (1024 tokens, blocks
    # 1, 2) is prefilled at t = 0 in 25.6 ms and its blocks go into the cache; B, the same two blocks at t = 1,
    # hits 1023 tokens (one is always computed): 1 / 40,000 s = 25 us of prefill; its KV is still all 1024
    # tokens, 92,012,544 B from GPU 1 to its decode GPU at 2 x 100 Gbit/s, then one 30 ms step.
    spec = layout_spec("single-node", 16, prefix_cache=True, prefix_cache_tokens=4096)
    c = serving.run_ideal(serving.Cluster(spec, [Request(1, 0.0, 1024, 2, (1, 2)), Request(2, 1.0, 1024, 2, (1, 2))]),
                          100e9)
    a, b = c.requests[1], c.requests[2]
    assert (a.cached_tokens, b.cached_tokens) == (0, 1023)
    assert a.prefill_compute_s == pytest.approx(1024 / 40_000) and b.prefill_compute_s == pytest.approx(1 / 40_000)
    assert a.kv_bytes == b.kv_bytes == 1024 * GLM5_BF16 == 92_012_544
    assert b.kv_tokens == 1024
    assert b.ttft_s == pytest.approx(1 / 40_000 + 92_012_544 * 8 / 200e9 + 0.030, abs=1e-12)
    assert sum(b.parts().values()) == pytest.approx(b.ttft_s, abs=1e-12)
    assert c.request_rows()[1]["cached_tokens"] == 1023 and c.results()["prefix"]["cached_tokens"] == 1023


def test_a_request_without_hash_ids_takes_the_stated_hit_in_whole_blocks():
    # prefix_hit 0.9 of 10,000 tokens: floor(9,000 / 512) = 17 blocks = 8,704 cached, 1,296 computed; the KV of
    # all 10,000 moves
    spec = dense_spec(prefix_hit=0.9)
    c = serving.run_ideal(serving.Cluster(spec, [Request(1, 0.0, 10_000, 1)]), 100e9)
    r = c.requests[1]
    assert r.cached_tokens == 8704 and r.prefill_compute_s == pytest.approx(1296 / 8000)
    assert r.kv_tokens == 10_000 and r.kv_bytes == 10_000 * DENSE_PER_RANK * 8


def test_kv_aware_routing_sends_a_turn_back_to_the_unit_holding_its_prefix():
    # glm5-recipe on 32 GPUs: two TP8 prefill units. t = 0: A (blocks 1-4, 2048 tokens) goes to unit 0, B
    # (blocks 11-14) to unit 1 (2048 queued tokens on unit 0). t = 1: C (1024 tokens, no hash ids) goes to unit 0
    # (both idle: the lower index); t = 1.001, A's next turn (blocks 1-6, 3072 tokens, C still in its step):
    # kv:           unit 0 costs 1024 queued + (3072 - 2048 cached) = 2048, unit 1 costs 0 + 3072 -> unit 0, a hit
    # least-loaded: unit 0 has 1024 queued, unit 1 none -> unit 1, no hit
    reqs = [Request(1, 0.0, 2048, 2, (1, 2, 3, 4)), Request(2, 0.0, 2048, 2, (11, 12, 13, 14)),
            Request(3, 1.0, 1024, 2), Request(4, 1.001, 3072, 2, (1, 2, 3, 4, 5, 6))]
    got = {}
    for routing in serving.ROUTINGS:
        spec = layout_spec("glm5-recipe", 32, prefix_cache=True, prefix_cache_tokens=65_536, prefill_routing=routing)
        c = serving.run_ideal(serving.Cluster(spec, reqs), 200e9)
        got[routing] = [(c.requests[i].prefill_unit[0], c.requests[i].cached_tokens) for i in (1, 2, 3, 4)]
    assert got["kv"] == [(0, 0), (1, 0), (0, 0), (0, 2048)]
    assert got["least-loaded"] == [(0, 0), (1, 0), (0, 0), (1, 0)]


# ------------------------------------------------------------ sessions in the closed loop
def test_a_sessions_next_turn_arrives_when_the_previous_one_ends_plus_think_time():
    # one slot; session 5: turn 0 (1024 tokens, blocks 1, 2) then turn 1 (2048, blocks 1-4); then session 6.
    # Turn 0: 1024 / 8000 = 0.128 s prefill, KV 0.671 ms, 3 decode steps of 20 ms; turn 1 arrives 0.5 s after
    # (think_s) and hits its first two blocks: 1024 tokens computed, 0.128 s; session 6 starts as turn 1 ends.
    spec = dense_spec(arrivals="closed", concurrency=1, think_s=0.5, prefix_cache=True, prefix_cache_tokens=8192)
    reqs = [Request(10, 0.0, 1024, 3, (1, 2), session=5, turn=0), Request(20, 0.0, 2048, 3, (7, 8), session=6),
            Request(11, 0.0, 2048, 3, (1, 2, 3, 4), session=5, turn=1)]
    c = serving.run_ideal(serving.Cluster(spec, reqs), 100e9, until_s=2.0)
    t0, t1, s6 = c.requests[10], c.requests[11], c.requests[20]
    one = 0.128 + kv_s(1024) + 3 * 0.02
    assert t0.done_s == pytest.approx(one)
    assert t1.arrival_s == pytest.approx(one + 0.5)
    assert t1.cached_tokens == 1024 and t1.prefill_compute_s == pytest.approx(0.128)
    assert t1.done_s == pytest.approx(one + 0.5 + 0.128 + kv_s(2048) + 3 * 0.02)
    assert s6.arrival_s == pytest.approx(t1.done_s) and s6.cached_tokens == 0
    assert [r["session"] for r in c.request_rows()[:3]] == [5, 5, 6]


def test_without_sessions_the_closed_loop_runs_the_trace_in_order_as_before():
    spec = dense_spec(arrivals="closed", concurrency=1, duration_s=1.0)
    c = serving.run_ideal(serving.Cluster(spec, [Request(i, 0.0, 1000, 3) for i in range(20)]), 100e9)
    assert [r.id for r in c.requests.values()] == list(range(6))


# ------------------------------------------------------------ decode memory
def test_decode_memory_holds_a_request_back_until_an_earlier_one_finishes():
    # one decode unit holding 1536 tokens. A (1000 in + 3 out = 1003) fits at t = 0; B (1003) arriving at 0.01
    # does not (2006 > 1536) and waits for A's last token: 0.125 s prefill + 0.655 ms KV + 3 x 20 ms =
    # 0.18565536 s. Then B is prefilled (its decode memory taken first, as SGLang's decode pre-allocates).
    spec = dense_spec(decode_memory=True, decode_kv_tokens=1536)
    c = serving.run_ideal(serving.Cluster(spec, [Request(1, 0.0, 1000, 3), Request(2, 0.01, 1000, 3)]), 100e9)
    a, b = c.requests[1], c.requests[2]
    a_done = 0.125 + kv_s(1000) + 3 * 0.02
    assert a.decode_memory_s == 0.0 and a.done_s == pytest.approx(a_done)
    assert b.decode_memory_s == pytest.approx(a_done - 0.01)
    assert b.prefill_start_s == pytest.approx(a_done) and b.prefill_queue_s == 0.0
    assert b.ttft_s == pytest.approx(a_done - 0.01 + 0.125 + kv_s(1000) + 0.02)
    assert sum(b.parts().values()) == pytest.approx(b.ttft_s, abs=1e-12)
    assert c.kv_memory()["decode_pool_peak_tokens"] == 1003
    # with room for both, B goes straight on (its prefill queued behind A's)
    c = serving.run_ideal(serving.Cluster(dense_spec(decode_memory=True, decode_kv_tokens=2048),
                                          [Request(1, 0.0, 1000, 3), Request(2, 0.01, 1000, 3)]), 100e9)
    assert c.requests[2].decode_memory_s == 0.0 and c.kv_memory()["decode_pool_peak_tokens"] == 2006


def test_the_decode_prefix_cache_moves_only_the_delta():
    # turn 1 (2048 tokens, blocks 1-4) finds turn 0's blocks 1, 2 on its decode unit: 1024 tokens' KV move, and
    # it takes 2048 + 3 - 1024 tokens of the pool; without the decode cache all 2048 move
    reqs = [Request(10, 0.0, 1024, 3, (1, 2), session=5, turn=0), Request(11, 0.0, 2048, 3, (1, 2, 3, 4), 5, 1)]
    got = {}
    for delta in (False, True):
        spec = dense_spec(arrivals="closed", concurrency=1, decode_memory=True, decode_kv_tokens=8192,
                          decode_prefix_cache=delta)
        c = serving.run_ideal(serving.Cluster(spec, reqs), 100e9, until_s=1.0)
        t1 = c.requests[11]
        got[delta] = (t1.decode_cached_tokens, t1.kv_tokens, t1.kv_bytes, t1.kv_alloc_tokens)
    assert got[False] == (0, 2048, 2048 * DENSE_PER_RANK * 8, 2051)
    assert got[True] == (1024, 1024, 1024 * DENSE_PER_RANK * 8, 1027)


def test_a_request_larger_than_a_decode_unit_is_refused_in_one_line():
    spec = dense_spec(decode_memory=True, decode_kv_tokens=512)
    with pytest.raises(TrafficError, match="request 1 needs 1003 tokens of KV, more than a decode unit holds"):
        serving.run_ideal(serving.Cluster(spec, [Request(1, 0.0, 1000, 3)]), 100e9)


def test_check_serves_applies_the_clusters_rules_before_it_runs():
    from traffic.model.serving_spec import check_serves

    spec = dense_spec(decode_memory=True, decode_kv_tokens=512)
    assert check_serves(spec, [Request(1, 0.0, 500, 3)]) is None
    with pytest.raises(TrafficError, match="request 2 needs 1003 tokens of KV, more than a decode unit holds"):
        check_serves(spec, [Request(1, 0.0, 500, 3), Request(2, 0.0, 1000, 3)])
    with pytest.raises(TrafficError, match="no request to serve"):
        check_serves(spec, [])
    # an EP group of 24 GPUs cannot hold GLM-5's 256 routed experts evenly
    e = placement.place(32, 1, 1, 0.25)
    moe = serving.ServingSpec(model=GLM5, prefill=serving.build_engines("prefill", e.prefill, 8),
                              decode=serving.build_engines("decode", e.decode, 24), duration_s=10.0)
    with pytest.raises(TrafficError, match="decode EP group of 24 GPUs does not divide 256 routed experts") as info:
        check_serves(moe, [Request(1, 0.0, 500, 3)])
    assert info.value.key == "decode_ep"


@pytest.mark.parametrize("kw, text", [
    (dict(prefix_hit=1.2), "prefix_hit 1.2"),
    (dict(prefill_routing="random"), "prefill_routing 'random' is not known"),
    (dict(gpu="a100"), "gpu 'a100' is not known; expected one of h200, h100, h800"),
    (dict(decode_mem_fraction=1.5), "decode_mem_fraction 1.5"),
    (dict(prefix_cache_tokens=100), "prefix_cache_tokens 100"),
    (dict(think_s=-1.0), "think_s -1.0"),
    (dict(prefix_cache="yes"), "prefix_cache 'yes' is not allowed; expected true or false"),
])
def test_bad_cache_and_memory_settings_name_the_value(kw, text):
    with pytest.raises(TrafficError, match=text):
        dense_spec(**kw)


def test_the_kv_pools_come_from_the_gpu_memory_unless_given_in_tokens():
    c = serving.Cluster(layout_spec("glm5-recipe", 32, dtype="fp8", prefix_cache=True, decode_memory=True),
                        [Request(1, 0.0, 10, 1)])
    assert {cache.capacity for cache in c.caches.values()} == {596_992 // 512}  # a TP8 prefill instance
    assert len(c.pools) == 16 and len({p.capacity for p in c.pools.values()}) == 1  # each GPU of the EP16 group
    assert next(iter(c.pools.values())).capacity // 65_536 == 17
    given = dataclasses.replace(c.spec, prefix_cache_tokens=4096, decode_kv_tokens=8192)
    c = serving.Cluster(given, [Request(1, 0.0, 10, 1)])
    assert {cache.capacity for cache in c.caches.values()} == {8}
    assert {p.capacity for p in c.pools.values()} == {8192}


# ------------------------------------------------------------ a small agentic cluster, ideally
@pytest.mark.parametrize("delta", [False, True])
def test_an_agentic_cluster_conserves_kv_and_never_overfills_a_cache_or_a_pool(delta):
    # glm5-recipe on 32 GPUs, FP8 KV, agentic-coding sessions in a closed loop of 128: the prefill caches from the
    # H200's memory (~597k tokens a TP8 instance: ~9 sessions' contexts, so they evict), decode pools cut to
    # 262,144 tokens a GPU and 5 ms decode steps, so that decode memory holds requests back and frees them
    from traffic.model import workloads

    reqs = workloads.agentic_coding(800, seed=1)
    spec = layout_spec("glm5-recipe", 32, dtype="fp8", arrivals="closed", concurrency=128, duration_s=16.0,
                       warmup_s=0.0, decode_step_s=0.005, prefix_cache=True, decode_memory=True,
                       decode_kv_tokens=262_144, decode_prefix_cache=delta)
    c = serving.run_ideal(serving.Cluster(spec, reqs), 200e9)
    served = [r for r in c.requests.values() if r.first_token_s is not None]
    assert len(served) > 128
    per_token = models.kv_bytes_per_token(GLM5, "fp8")  # 61,464 B: each decode unit is one GPU
    delivered: dict[int, int] = {}
    for m in c.messages.values():
        if m.kind == "kv" and m.id in c.delivered_at:
            delivered[m.request_id] = delivered.get(m.request_id, 0) + m.bytes
    for r in served:
        assert r.kv_tokens == r.input_tokens - r.decode_cached_tokens  # its whole context, or the delta
        assert r.kv_bytes == per_token * r.kv_tokens == delivered[r.id]
        assert sum(r.parts().values()) == pytest.approx(r.ttft_s, abs=1e-9)
        assert r.cached_tokens < r.input_tokens
    assert any(r.cached_tokens for r in served)  # later turns hit their session's earlier prompt
    assert any(r.decode_memory_s > 0 for r in served)  # decode memory held some back, then let them in
    assert (max(r.decode_cached_tokens for r in served) > 0) == delta
    for pool in c.pools.values():
        assert 0 < pool.peak <= pool.capacity
    for cache in c.caches.values():
        assert cache.peak <= cache.capacity
    assert sum(cache.evictions for cache in c.caches.values()) > 0
    assert c.results()["prefix"]["hit_rate"] > 0.3


def test_the_breakdown_names_the_p50_and_p99_requests_cached_tokens_and_kv_bytes():
    from traffic.model import breakdown

    spec = layout_spec("single-node", 16, prefix_cache=True, prefix_cache_tokens=8192)
    reqs = [Request(i, 0.2 * i, 1024 * (1 + i % 3), 2, tuple(range(2 * (1 + i % 3)))) for i in range(12)]
    c = serving.run_ideal(serving.Cluster(spec, reqs), 100e9)
    rows = c.request_rows()
    got = breakdown.ttft_breakdown(rows, 0.0, 10.0)
    by_id = {str(r["request_id"]): r for r in rows}
    for which in ("p50", "p99"):
        row = by_id[got[which]["request_id"]]
        assert {k: got[which][k] for k in ("input_tokens", "cached_tokens", "kv_bytes")} == \
               {k: row[k] for k in ("input_tokens", "cached_tokens", "kv_bytes")}
        assert sum(got[which][k] for k in serving.TTFT_PARTS) == pytest.approx(got[which]["ttft"], abs=0.01)
    assert any(r["cached_tokens"] for r in rows)
    # requests.csv of a run from before: no decode_memory_s, no sizes; its wait counts as 0, sizes unknown
    old = [{k: v for k, v in r.items() if k not in ("decode_memory_s", "cached_tokens")} for r in rows]
    then = breakdown.ttft_breakdown(old, 0.0, 10.0)
    assert then["requests"] == got["requests"] and then["p50"]["decode_memory"] == 0.0
    assert then["p50"]["cached_tokens"] is None


# ------------------------------------------------------------ HiCache: the host tier behind a prefill cache
def test_a_hit_only_the_host_tier_holds_is_loaded_at_the_host_link_and_counted_as_cached():
    # single-node, one TP8 prefill instance at 8 x 5000 tokens/s, its GPU cache 2 blocks (1,024 tokens) and a host
    # tier of 2 x that (4 blocks). A = blocks (1, 2), B = blocks (3, 4) evict A's from the GPU (LRU) but the host
    # tier keeps all four (write-through). C = (1, 2) again at t = 2: the GPU holds none of its blocks, the host
    # both, so 1,023 tokens are a hit (one is always computed), all from the host: loading them costs
    # 1,023 x 61,464 B (GLM-5 FP8, every TP rank a full copy) / 64 GB/s = 0.982 ms, then 1 token = 25 us.
    spec = layout_spec("single-node", 16, dtype="fp8", prefix_cache=True, prefix_cache_tokens=1024, hicache_ratio=2)
    reqs = [Request(1, 0.0, 1024, 2, (1, 2)), Request(2, 1.0, 1024, 2, (3, 4)), Request(3, 2.0, 1024, 2, (1, 2))]
    c = serving.run_ideal(serving.Cluster(spec, reqs), 100e9)
    third = c.requests[3]
    assert (third.cached_tokens, third.host_tokens) == (1023, 1023)
    assert third.prefill_compute_s == pytest.approx(1023 * 61_464 / 64e9 + 1 / 40_000)
    assert third.kv_tokens == 1024  # the whole context still moves
    # without the host tier the same request finds nothing and computes all 1,024 tokens
    bare = serving.run_ideal(serving.Cluster(dataclasses.replace(spec, hicache_ratio=0.0), reqs), 100e9)
    assert (bare.requests[3].cached_tokens, bare.requests[3].host_tokens) == (0, 0)
    assert bare.requests[3].prefill_compute_s == pytest.approx(1024 / 40_000)


# ------------------------------------------------------------ the hit rate a run reports (issue 40)
def test_four_requests_sharing_a_prefix_hit_three_fifths_of_their_tokens():
    # single-node (one prefill unit), a cache far larger than the requests; four requests of 2,560 tokens (5 blocks)
    # share their first 4 blocks and each has its own fifth, arriving one a second (each prefilled long before the
    # next): A misses, B, C and D hit the shared 2,048 tokens. 3 x 2,048 / (4 x 2,560) = 0.6, all in the GPU's pool.
    spec = layout_spec("single-node", 16, prefix_cache=True, prefix_cache_tokens=65_536)
    reqs = [Request(i, float(i), 2560, 2, (1, 2, 3, 4, 10 + i)) for i in range(4)]
    prefix = serving.run_ideal(serving.Cluster(spec, reqs), 100e9).results()["prefix"]
    assert {k: prefix[k] for k in ("requests", "with_hash_ids", "input_tokens", "cached_tokens", "host_tokens")} == \
        {"requests": 4, "with_hash_ids": 4, "input_tokens": 10_240, "cached_tokens": 6144, "host_tokens": 0}
    assert (prefix["hit_rate"], prefix["device_hit_rate"], prefix["host_hit_rate"]) == (0.6, 0.6, 0.0)


def test_the_hit_is_split_between_the_gpu_pool_and_the_host_tier():
    # a GPU cache of 5 blocks, a host tier of 20 (hicache_ratio 4). A = (1..4), 2,048 tokens: a miss. X = (20..24)
    # evicts A's blocks from the GPU (LRU), the host tier keeps them (write-through): a miss. B = (1..4, 30), 2,560
    # tokens: the GPU has none of its blocks, the host 4: 2,048 from the host tier; B's blocks go back into the GPU.
    # C = (1..4, 31): 2,048 from the GPU. Of 9,728 prompt tokens, 4,096 hit: 2,048 each tier.
    spec = layout_spec("single-node", 16, prefix_cache=True, prefix_cache_tokens=2560, hicache_ratio=4)
    reqs = [Request(0, 0.0, 2048, 2, (1, 2, 3, 4)), Request(1, 1.0, 2560, 2, (20, 21, 22, 23, 24)),
            Request(2, 2.0, 2560, 2, (1, 2, 3, 4, 30)), Request(3, 3.0, 2560, 2, (1, 2, 3, 4, 31))]
    c = serving.run_ideal(serving.Cluster(spec, reqs), 100e9)
    assert [(c.requests[i].cached_tokens, c.requests[i].host_tokens) for i in range(4)] == \
        [(0, 0), (0, 0), (2048, 2048), (2048, 0)]
    prefix = c.results()["prefix"]
    assert (prefix["input_tokens"], prefix["cached_tokens"], prefix["host_tokens"]) == (9728, 4096, 2048)
    assert (prefix["hit_rate"], prefix["device_hit_rate"], prefix["host_hit_rate"]) == (0.4211, 0.2105, 0.2105)


def test_the_hit_counts_the_measured_requests_only():
    # the same four requests with a warm-up of 1.5 s: A (t = 0) and B (t = 1) are not measured, C and D hit 2,048 of
    # 2,560 tokens each: 0.8
    spec = layout_spec("single-node", 16, prefix_cache=True, prefix_cache_tokens=65_536, warmup_s=1.5)
    reqs = [Request(i, float(i), 2560, 2, (1, 2, 3, 4, 10 + i)) for i in range(4)]
    prefix = serving.run_ideal(serving.Cluster(spec, reqs), 100e9).results()["prefix"]
    assert (prefix["requests"], prefix["input_tokens"], prefix["hit_rate"]) == (2, 5120, 0.8)


# ------------------------------------------------------------ warm start of a closed loop with sessions
def test_a_warm_start_joins_sessions_mid_way_with_their_prefix_cached_and_spreads_the_first_turns():
    # two sessions of three turns each (blocks grow by one a turn), two slots, single-node (one TP8 prefill unit
    # at 8 x 5000 = 40,000 tokens/s). Each slot joins its session at a turn k drawn from the warm start's own
    # stream; the prefix of turn k-1 is in the unit's cache, so turn k's hit is turn k-1's whole blocks; the first
    # turns arrive within [0, new tokens / 40,000 s], new tokens = turn k's input minus turn k-1's.
    def turns(session: int) -> list[Request]:
        base = 100 * session
        return [Request(base + t, 0.0, 512 * (t + 1) + 100, 4, tuple(base + b for b in range(t + 2)), session, t)
                for t in range(3)]

    reqs = turns(1) + turns(2)
    spec = layout_spec("single-node", 16, arrivals="closed", concurrency=2, prefix_cache=True,
                       prefix_cache_tokens=64 * 512, warm_start=True, duration_s=5.0)
    cluster = serving.Cluster(spec, reqs)
    actions = cluster.start(0.0)
    timers = [a for a in actions if isinstance(a, serving.Timer) and a.key[0] == "turn"]
    assert len(timers) == 2
    firsts = [cluster._waiting_turn[t.key[1]][0] for t in timers]
    new = sum(r.input_tokens - (512 * r.turn + 100 if r.turn else 0) for r in firsts)
    assert all(0.0 <= t.at <= new / 40_000 for t in timers)
    cache = cluster.caches[(0, 0)]
    for r in firsts:  # the previous turn's blocks are cached (a first turn has none)
        assert cache.match(r.hash_ids) == (r.turn + 1 if r.turn else 0)
    ran = serving.run_ideal(serving.Cluster(spec, reqs), 100e9)  # the same draws: the same first turns
    for r in firsts:
        state = ran.requests[r.request_id]
        assert state.cached_tokens == (min(512 * (r.turn + 1), r.input_tokens - 1) if r.turn else 0)
    # without a warm start both sessions begin at turn 0, at t = 0
    cold = serving.Cluster(dataclasses.replace(spec, warm_start=False), reqs)
    cold.start(0.0)
    assert sorted((r.session, r.turn, r.arrival_s) for r in cold.requests.values()) == [(1, 0, 0.0), (2, 0, 0.0)]
