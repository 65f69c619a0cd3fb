"""Schedule timing: FIFO queueing, whole vs layerwise, slicing, bytes_scale, TTFT."""

from __future__ import annotations

import pytest

from common.errors import TestbedError
from traffic.model.models import custom_model, get_model, kv_bytes_per_token
from traffic.model.placement import Scheduler, place
from traffic.model.schedule import build_schedule, ttft_proxies, ttft_proxy
from traffic.model.traces import Request

# 4 layers, 2 heads x 16 dims, bf16: 2*4*2*16*2 = 512 B/token; 1000 tokens/s/GPU
TINY = custom_model("tiny", "gqa", layers=4, kv_heads=2, head_dim=16, prefill_tokens_per_s_per_gpu=1000.0)


def _one_pair():
    return place(2, 1, 1, gpus_per_server=1)  # GPU 1 prefill TP1, GPU 2 decode TP1


def test_fifo_queueing_and_compute_time():
    reqs = [Request(0, 0.0, 1000, 1), Request(1, 0.5, 500, 1), Request(2, 5.0, 100, 1)]
    s = build_schedule(reqs, _one_pair(), Scheduler(), TINY, chunk_bytes=None)
    t = {r.request_id: r for r in s.requests}
    assert (t[0].prefill_start_s, t[0].prefill_end_s) == (0.0, 1.0)
    assert (t[1].prefill_start_s, t[1].prefill_end_s) == (1.0, 1.5)   # waited 0.5 s
    assert t[1].queueing_s == 0.5
    assert (t[2].prefill_start_s, t[2].prefill_end_s) == pytest.approx((5.0, 5.1))
    # whole mode: one transfer per pair at prefill end with all bytes
    assert [(x.request_id, x.chunk, x.bytes, x.scheduled_start_s) for x in s.transfers] == \
        [(0, 0, 512_000, 1.0), (1, 0, 256_000, 1.5), (2, 0, 51_200, pytest.approx(5.1))]
    assert (s.transfers[0].src_gpu, s.transfers[0].dst_gpu) == (1, 2)


def test_compute_time_scales_with_tp_and_override():
    pl = place(16, 4, 4)
    req = [Request(0, 0.0, 4000, 1)]
    assert build_schedule(req, pl, Scheduler(), TINY).requests[0].prefill_end_s == 1.0  # 4000/(1000*4)
    fast = build_schedule(req, pl, Scheduler(), TINY, prefill_tokens_per_s_per_gpu=2000.0)
    assert fast.requests[0].prefill_end_s == 0.5


def test_layerwise_chunks_timing_and_slicing():
    req = Request(7, 2.0, 1000, 1)           # 512,000 B total, 128,000 B per layer
    s = build_schedule([req], _one_pair(), Scheduler(), TINY, mode="layerwise", chunk_bytes=50_000)
    chunks = sorted({x.chunk for x in s.transfers})
    assert chunks == [0, 1, 2, 3]
    for c in chunks:
        parts = [x for x in s.transfers if x.chunk == c]
        assert [p.bytes for p in parts] == [50_000, 50_000, 28_000]
        assert [p.slice_index for p in parts] == [0, 1, 2]
        assert [p.scheduled_start_s for p in parts] == [pytest.approx(2.0 + 0.25 * (c + 1))] * 3
    assert sum(x.bytes for x in s.transfers) == 512_000 == s.requests[0].kv_bytes
    assert s.checked_chunks == 4 and s.fidelity_warnings == 0


def test_default_slices_are_64_kib():
    s = build_schedule([Request(0, 0.0, 1000, 1)], _one_pair(), Scheduler(), TINY)
    assert [x.bytes for x in s.transfers] == [65_536] * 7 + [512_000 - 7 * 65_536]


def test_bytes_scale_and_fidelity_warnings():
    reqs = [Request(0, 0.0, 1000, 1), Request(1, 0.0, 10, 1)]
    s = build_schedule(reqs, _one_pair(), Scheduler(), TINY, bytes_scale=100.0, chunk_bytes=None)
    sizes = {x.request_id: x.bytes for x in s.transfers}
    assert sizes == {0: 5_120, 1: 51}
    assert s.requests[0].kv_bytes == 512_000 and s.requests[0].emulated_bytes == 5_120
    assert s.requests[0].prefill_end_s == 1.0            # times stay real
    assert s.fidelity_threshold_bytes == 4500 and s.fidelity_warnings == 1   # 51 B < 3 x 1500 B


def test_real_model_layerwise_chunk_count():
    model = get_model("llama-3.1-70b")
    pl = place(16, 8, 8)
    s = build_schedule([Request(0, 0.0, 100, 1)], pl, Scheduler(), model, mode="layerwise",
                       bytes_scale=1.0, chunk_bytes=None)
    assert len(s.transfers) == 8 * 80                      # 8 rank pairs x 80 layers
    assert sum(x.bytes for x in s.transfers) == 100 * kv_bytes_per_token(model, "bf16")
    assert {(x.src_gpu - 1, x.dst_gpu - 9) for x in s.transfers} == {(i, i) for i in range(8)}


def test_schedule_is_deterministic_and_sorted():
    reqs = [Request(i, 0.05 * i, 200 + 37 * i, 5) for i in range(40)]
    pl = place(32, 4, 2)
    a = build_schedule(reqs, pl, Scheduler("random", 3), TINY, mode="layerwise")
    b = build_schedule(reqs, pl, Scheduler("random", 3), TINY, mode="layerwise")
    assert a.transfers == b.transfers and a.requests == b.requests
    starts = [x.scheduled_start_s for x in a.transfers]
    assert starts == sorted(starts)


def test_ttft_proxy():
    reqs = [Request(0, 0.0, 1000, 1), Request(1, 0.5, 500, 1)]
    s = build_schedule(reqs, _one_pair(), Scheduler(), TINY)
    t1 = s.timing(1)
    assert ttft_proxy(t1) == 1.0                          # 0.5 queueing + 0.5 compute
    assert ttft_proxy(t1, transfer_end_s=1.8) == pytest.approx(1.3)
    assert ttft_proxy(t1, transfer_end_s=1.2) == 1.0      # finished before prefill end: no tail
    got = ttft_proxies(s, {0: 1.25, 1: 1.5})
    assert got == {0: pytest.approx(1.25), 1: pytest.approx(1.0)}
    with pytest.raises(TestbedError, match="no measured transfer end for request_id 1"):
        ttft_proxies(s, {0: 1.25})
    assert ttft_proxies(s, {0: 1.25}, allow_missing=True)[1] == 1.0


@pytest.mark.parametrize("kwargs,message", [
    (dict(mode="stream"), "transfer mode 'stream'"), (dict(bytes_scale=0), "bytes_scale 0"),
    (dict(chunk_bytes=0), "chunk_bytes 0"), (dict(dtype="int4"), "KV dtype 'int4'"),
])
def test_schedule_validation(kwargs, message):
    with pytest.raises(TestbedError, match=message):
        build_schedule([Request(0, 0.0, 10, 1)], _one_pair(), Scheduler(), TINY, **kwargs)


def test_duplicate_request_ids_rejected():
    with pytest.raises(TestbedError, match="request_id 0 appears twice"):
        build_schedule([Request(0, 0.0, 10, 1), Request(0, 1.0, 10, 1)], _one_pair(), Scheduler(), TINY)
