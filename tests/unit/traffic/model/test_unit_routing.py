"""traffic.model.unit_routing: the serving cluster's unit choices from indexes, worked out by hand."""

from __future__ import annotations

from traffic.model.prefix_cache import PrefixCache
from traffic.model.unit_routing import LeastLoaded, PrefillRouting

KEYS = [(0, 0), (0, 1), (1, 0), (2, 0)]


def test_least_loaded_is_the_lowest_unit_among_the_least_loaded_after_every_change():
    loads = LeastLoaded(KEYS)
    assert loads.best() == (0, 0)  # all empty: the first
    loads.set((0, 0), 500)
    loads.set((0, 1), 200)
    assert loads.best() == (1, 0)  # (1, 0) and (2, 0) still empty
    loads.set((1, 0), 300)
    loads.set((2, 0), 300)
    assert loads.best() == (0, 1)
    loads.set((0, 1), 900)  # its old entry (200) is stale now
    assert loads.best() == (1, 0)  # 300, before (2, 0)'s 300
    loads.set((0, 1), 200)  # back to 200: a fresh entry
    assert loads.best() == (0, 1)


def test_least_loaded_prefill_is_the_fewest_tokens_queued():
    routing = PrefillRouting(KEYS, kv=False)
    for key, tokens in zip(KEYS, (4000, 1000, 1000, 3000)):
        routing.set_queued(key, tokens)
    assert routing.pick([1, 2, 3], 5000, 0) == (0, 1)


def test_kv_routing_weighs_the_cached_prefix_against_the_queue():
    """Blocks of 512 tokens. Unit (1, 0) holds the request's first 8 blocks (4,096 tokens) on its host tier and
    has 3,000 tokens queued: 3,000 + 6,000 - 4,096 = 4,904; (0, 1) holds 2 blocks and 0 queued: 6,000 - 1,024 =
    4,976; (2, 0) none: 6,000 + 500. So (1, 0); with 100 more queued there, (0, 1)."""
    routing = PrefillRouting(KEYS, kv=True)
    gpu, host = routing.tiers
    chain = list(range(12))
    caches = {key: PrefixCache(None, gpu, routing.position[key]) for key in KEYS}
    hosts = {key: PrefixCache(None, host, routing.position[key]) for key in KEYS}
    caches[(0, 1)].insert(chain[:2])
    hosts[(1, 0)].insert(chain[:8])
    caches[(1, 0)].insert(chain[:1])
    for key, tokens in zip(KEYS, (9000, 0, 3000, 500)):
        routing.set_queued(key, tokens)
    assert routing.pick(chain, 6000, 0) == (1, 0)
    routing.set_queued((1, 0), 3100)
    assert routing.pick(chain, 6000, 0) == (0, 1)
    assert routing.pick(chain, 6000, 5000) == (0, 1)  # an assumed hit larger than any cache's: queues decide
    assert routing.pick([], 6000, 0) == (0, 1)  # no block chain: nothing is cached anywhere
