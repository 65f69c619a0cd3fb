"""Rank mapping: who sends to whom, and byte conservation per decode rank."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from common.errors import TestbedError
from traffic.model.models import custom_model, get_model, kv_bytes_per_token_per_rank
from traffic.model.placement import Instance
from traffic.model.rankmap import kv_transfers

L70 = get_model("llama-3.1-70b")
DSV3 = get_model("deepseek-v3")
HEAD = 2 * 80 * 128 * 2  # bytes per kv head per token, Llama-3.1-70B bf16


def _p(tp, first=1):
    return Instance("prefill", 0, tuple(range(first, first + tp)))


def _d(tp, first=17):
    return Instance("decode", 0, tuple(range(first, first + tp)))


def _pairs(transfers, p, d):
    """(prefill rank, decode rank) -> bytes."""
    return {(p.gpus.index(t.src_gpu), d.gpus.index(t.dst_gpu)): t.bytes for t in transfers}


def test_equal_tp_rank_i_to_rank_i():
    p, d = _p(4), _d(4)
    got = _pairs(kv_transfers(100, L70, "bf16", p, d), p, d)
    assert got == {(i, i): 100 * 2 * HEAD for i in range(4)}


def test_decode_tp_larger():
    p, d = _p(2), _d(8)
    got = _pairs(kv_transfers(10, L70, "bf16", p, d), p, d)
    assert got == {(j // 4, j): 10 * HEAD for j in range(8)}


def test_prefill_tp_larger():
    p, d = _p(8), _d(2)
    got = _pairs(kv_transfers(10, L70, "bf16", p, d), p, d)
    assert got == {(i, i // 4): 10 * HEAD for i in range(8)}


def test_decode_replicated_heads_each_replica_gets_a_copy():
    p, d = _p(4), _d(16)
    got = _pairs(kv_transfers(3, L70, "bf16", p, d), p, d)
    assert got == {(j // 4, j): 3 * HEAD for j in range(16)}
    assert sum(got.values()) == 16 * 3 * HEAD  # 2x the model's KV: heads replicated on decode


def test_prefill_replicated_heads_lowest_replica_sends():
    p, d = _p(16), _d(2)
    got = _pairs(kv_transfers(3, L70, "bf16", p, d), p, d)
    # prefill rank i holds head i // 2; ranks 0, 2, 4, ... send, odd replicas idle
    assert got == {(i, i // 8): 3 * HEAD for i in range(0, 16, 2)}


@pytest.mark.parametrize("sender,rid,expect", [("rank0", 5, 0), ("rotate", 5, 1), ("rotate", 6, 2)])
def test_mla_one_sender_full_copy_each_decode_rank(sender, rid, expect):
    p, d = _p(4), _d(8)
    got = _pairs(kv_transfers(7, DSV3, "bf16", p, d, request_id=rid, mla_sender=sender), p, d)
    assert got == {(expect, j): 7 * 70_272 for j in range(8)}


MODELS = [L70, DSV3, custom_model("h4", "gqa", layers=3, kv_heads=4, head_dim=16),
          custom_model("h1", "gqa", layers=2, kv_heads=1, head_dim=8)]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_byte_conservation_property(model):
    tps = [1, 2, 4, 8, 16]
    for pt, dt, dtype, tokens in itertools.product(tps, tps, ["bf16", "fp8"], [1, 37]):
        p, d = _p(pt), _d(dt, first=33)
        transfers = kv_transfers(tokens, model, dtype, p, d)
        per_dst = defaultdict(int)
        for t in transfers:
            assert t.src_gpu in p.gpus and t.dst_gpu in d.gpus and t.bytes > 0
            per_dst[t.dst_gpu] += t.bytes
        want = kv_bytes_per_token_per_rank(model, dtype, dt) * tokens
        assert dict(per_dst) == {g: want for g in d.gpus}, (pt, dt, dtype)
        # sources obey the README rule
        for t in transfers:
            i, j = p.gpus.index(t.src_gpu), d.gpus.index(t.dst_gpu)
            if model.attention == "mla":
                assert i == 0
            elif dt >= pt:
                assert i == j // (dt // pt)
            else:
                assert j * (pt // dt) <= i < (j + 1) * (pt // dt)


def test_bad_inputs():
    with pytest.raises(TestbedError, match="TP 3 does not split"):
        kv_transfers(1, L70, "bf16", Instance("prefill", 0, (1, 2, 3)), _d(1))
    with pytest.raises(TestbedError, match="expected prefill then decode"):
        kv_transfers(1, L70, "bf16", _d(1), _p(1))
    with pytest.raises(TestbedError, match="tokens -1"):
        kv_transfers(-1, L70, "bf16", _p(1), _d(1))
    with pytest.raises(TestbedError, match="mla_sender 'first'"):
        kv_transfers(1, DSV3, "bf16", _p(1), _d(1), mla_sender="first")
    assert kv_transfers(0, L70, "bf16", _p(1), _d(1)) == []
