"""Where the serving cluster sends a request, without a pass over every unit's state: the same unit the scans
of ``traffic.model.serving.Cluster`` picked, from figures kept up to date as the units change. At n = 16,384 a
request's decode unit was a scan of 8,192 KV pools and its prefill unit a sum over 1,024 queues and 1,024
prefix-cache matches of its whole block chain (18 ms a request, ~4,000 requests in the first cluster second).

* ``LeastLoaded``: the unit of least load, the lowest (engine, unit) among equals, from a heap whose entries
  are skipped once their unit's load has changed (decode units by KV committed).
* ``PrefillRouting``: each prefill unit's queued tokens, told on every change, and the caches' block holders
  (``prefix_cache.Holders``), so a request's cost on every unit is two lookups.
"""

from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np

from traffic.model.prefix_cache import Holders, cached_tokens

Key = tuple[int, int]  # (engine index, unit)


class LeastLoaded:
    """The unit a scan of every unit by (load, engine, unit) picks (``best``), with each unit's load told on
    every change (``set``)."""

    def __init__(self, keys: Sequence[Key]) -> None:
        self.load = {key: 0 for key in keys}
        self.heap = [(0, *key) for key in keys]
        heapq.heapify(self.heap)

    def set(self, key: Key, load: int) -> None:
        if self.load[key] != load:
            self.load[key] = load
            heapq.heappush(self.heap, (load, *key))

    def best(self) -> Key:
        while True:
            load, e, u = self.heap[0]
            if self.load[(e, u)] == load:
                return e, u
            heapq.heappop(self.heap)


class PrefillRouting:
    """The prefill unit of a request: ``least-loaded``, the fewest tokens queued; ``kv`` (Dynamo's KV-aware
    router), the fewest tokens to prefill there, those queued plus the request's own not cached there (its
    longest cached prefix on the unit's GPU or host tier); the lowest (engine, unit) among equals. Units are
    numbered in (engine, unit) order (``position``); the caches report their blocks under those numbers."""

    def __init__(self, keys: Sequence[Key], kv: bool) -> None:
        self.keys = list(keys)  # in (engine, unit) order
        self.position = {key: i for i, key in enumerate(self.keys)}
        self.queued = np.zeros(len(self.keys), dtype=np.int64)  # tokens still to prefill of the requests queued
        self.kv = kv
        self.tiers = (Holders(), Holders()) if kv else (None, None)  # GPU tier, host tier

    def set_queued(self, key: Key, tokens: int) -> None:
        self.queued[self.position[key]] = tokens

    def pick(self, chain: Sequence[int], input_tokens: int, cached: int) -> Key:
        """The unit for a request of ``input_tokens`` with block ``chain``, ``cached`` of its tokens known
        cached (an assumed hit)."""
        if not self.kv:
            return self.keys[int(np.argmin(self.queued))]  # argmin: the first of equals
        hit = np.zeros(len(self.keys), dtype=np.int64)  # no chain, or no cache: nothing cached anywhere
        if chain and self.tiers[0].owners:
            blocks = np.zeros(len(self.keys), dtype=np.int64)
            for tier in self.tiers:
                got = tier.matches(chain)
                if got:
                    at = np.fromiter(got.keys(), dtype=np.int64, count=len(got))
                    blocks[at] = np.maximum(blocks[at], np.fromiter(got.values(), dtype=np.int64, count=len(got)))
            depths, inverse = np.unique(blocks, return_inverse=True)
            hit = np.array([cached_tokens(int(b), input_tokens) for b in depths], dtype=np.int64)[inverse]
        return self.keys[int(np.argmin(self.queued + input_tokens - np.maximum(cached, hit)))]


__all__ = ["LeastLoaded", "PrefillRouting"]
