"""traffic.model.prefix_cache and traffic.model.memory: hits, evictions and pins on hand-made hash_ids chains,
and the KV pool sizes from GPU memory, worked out by hand."""

from __future__ import annotations

import pytest

from traffic.model import memory
from traffic.model.errors import TrafficError
from traffic.model.models import get_model
from traffic.model.prefix_cache import PrefixCache, assumed_cached_tokens, cached_tokens


def test_a_hit_is_the_longest_cached_prefix_of_the_chain():
    c = PrefixCache(capacity=None)
    assert c.match([1, 2, 3]) == 0
    assert c.insert([1, 2, 3]) == 3
    assert c.match([1, 2, 3, 4]) == 3  # the request's own next turn: its earlier blocks, then new ones
    assert c.match([1, 2, 9, 3]) == 2  # stops at the first block not cached, whatever follows
    assert c.match([7, 1, 2]) == 0


def test_lru_evicts_the_leaf_first_and_never_a_block_of_the_chain_going_in():
    c = PrefixCache(capacity=4)
    c.insert([1, 2, 3])                       # A: LRU order 3, 2, 1 (the chain's first block most recent)
    assert c.blocks() == [3, 2, 1]
    assert c.insert([1, 2, 4, 5]) == 2        # B shares A's first two blocks; 4 fits, 5 evicts A's leaf 3
    assert c.blocks() == [5, 4, 2, 1] and c.evictions == 1
    assert c.match([1, 2, 3]) == 2            # A now hits its first two blocks only
    c.insert([6])                             # C: evicts B's leaf 5, not its parent 4
    assert c.blocks() == [4, 2, 1, 6] and c.evictions == 2
    assert c.match([1, 2, 4, 5]) == 3
    assert len(c) <= 4 and c.peak == 4


def test_pinned_blocks_are_not_evicted_and_a_chain_that_does_not_fit_is_cut_at_the_root_side():
    c = PrefixCache(capacity=4)
    c.insert([1, 2, 3])
    c.insert([1, 2, 4, 5])
    c.insert([6])                             # blocks 4, 2, 1, 6
    c.acquire([1, 2, 4, 5], 3)                # a running request pins its matched prefix 1, 2, 4
    assert c.pinned == 3 and c.blocks() == [6, 4, 2, 1]
    assert c.insert([7, 8]) == 1              # 7 evicts 6; 8 finds only pinned blocks and 7 itself: left out
    assert c.blocks() == [4, 2, 1, 7] and c.match([7, 8]) == 1
    assert not c.trim(2)                      # three blocks are pinned: nothing evicted
    assert len(c) == 4
    c.release([1, 2, 4, 5], 3)
    assert c.trim(2) and c.blocks() == [1, 7]  # 4 then 2 go: the leaf before its parent
    with pytest.raises(TrafficError, match="not pinned"):
        c.release([1], 1)
    with pytest.raises(TrafficError, match="not all cached"):
        c.acquire([1, 2], 2)


def test_cached_tokens_are_whole_blocks_and_leave_one_token_to_compute():
    assert cached_tokens(1, 1000) == 512
    assert cached_tokens(2, 1000) == 999       # a full hit still computes the last token
    assert cached_tokens(0, 1) == 0
    assert assumed_cached_tokens(0.9, 64_000) == 112 * 512 == 57_344  # floor(57,600 / 512) blocks
    assert assumed_cached_tokens(0.9, 1000) == 512
    assert assumed_cached_tokens(1.0, 1024) == 1023
    with pytest.raises(TrafficError, match="prefix_hit 1.5"):
        assumed_cached_tokens(1.5, 100)


def test_kv_pools_from_gpu_memory_worked_out_by_hand():
    glm5 = get_model("glm-5")
    routed = 75 * 256 * 3 * 6144 * 2048
    # a TP8 prefill instance: every weight split over its 8 GPUs
    assert memory.weights_per_gpu(glm5, 8, 8, "fp8") == 744e9 / 8
    # a GPU of an EP16 decode group (data-parallel attention): 1/16 of the routed experts, all the rest
    assert memory.weights_per_gpu(glm5, 1, 16, "fp8") == pytest.approx(routed / 16 + 744e9 - routed)
    assert memory.weights_per_gpu(glm5, 1, 16, "bf16") == pytest.approx(2 * (routed / 16 + 744e9 - routed))
    prefill = memory.kv_pool_tokens(glm5, "fp8", "fp8", "h200", 0.92, 8, 8)
    assert prefill == int((141e9 * 0.92 - 93e9) // 61_464) // 512 * 512 == 596_992
    decode = memory.kv_pool_tokens(glm5, "fp8", "fp8", "h200", 0.95, 1, 16)
    assert decode == int((141e9 * 0.95 - (routed / 16 + 744e9 - routed)) // 61_464) // 512 * 512
    assert decode // 65_536 == 17  # seventeen 64K contexts a decode GPU
    with pytest.raises(TrafficError, match="under one 512-token block"):  # GLM-5 FP8 does not fit 8 x 80 GB
        memory.kv_pool_tokens(glm5, "fp8", "fp8", "h100", 0.92, 8, 8)


def test_a_kv_pool_never_holds_more_than_its_capacity():
    pool = memory.KVPool(4 * 512, PrefixCache(capacity=None))
    assert pool.try_allocate(1024)
    pool.insert([1, 2])                       # cached blocks take the room the allocation leaves
    assert pool.used == 2048 and pool.cache.capacity == 2
    assert pool.try_allocate(1024)            # room for it: both cached blocks are evicted
    assert len(pool.cache) == 0 and pool.used == 2048
    assert not pool.try_allocate(1)
    pool.free(1024)
    assert pool.try_allocate(512) and pool.peak == 2048


def test_holders_give_every_caches_match_in_one_walk():
    """Four caches of a group report their blocks (inserts, evictions under pins) to one Holders; its matches
    of any chain are each cache's own match, for chains sharing a system prefix and chains of their own."""
    import random

    from traffic.model.prefix_cache import Holders

    rng = random.Random(7)
    holders = Holders()
    caches = [PrefixCache(capacity, holders, owner) for owner, capacity in enumerate((None, 60, 30, 12))]
    system = list(range(8))
    chains = [system + [1000 * s + t for t in range(rng.randrange(1, 30))] for s in range(40)]
    chains += [[5000 + 100 * s + t for t in range(rng.randrange(1, 10))] for s in range(10)]  # no shared prefix
    for step in range(600):
        cache, chain = rng.choice(caches), rng.choice(chains)
        n = cache.match(chain)
        if rng.random() < 0.3 and n:
            cache.acquire(chain, n)
            cache.release(chain, n) if rng.random() < 0.5 else None
        cache.insert(chain[:rng.randrange(1, len(chain) + 1)])
        probe = rng.choice(chains)
        got = holders.matches(probe)
        assert {o: c.match(probe) for o, c in enumerate(caches) if c.match(probe)} == \
               {o: d for o, d in got.items() if d}, step
    assert sum(c.evictions for c in caches) > 100  # the bounded caches did evict
