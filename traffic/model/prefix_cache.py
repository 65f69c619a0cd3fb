"""A prefix cache over 512-token KV blocks: LRU eviction with radix semantics.

Requests name their prompt's KV blocks by ``hash_ids`` (Mooncake's trace
format: one id per 512-token block, the same id in two requests the same
reusable prefix block; kvcache-ai/Mooncake, FAST'25 traces). A cache holds
blocks by id, up to ``capacity`` blocks (None: unbounded):

* **hit** (``match``): the longest prefix of a request's block chain that is
  present, as a radix tree matches (SGLang's RadixCache, vLLM's prefix
  caching): the chain stops at its first missing block, whatever lies beyond.
* **insert**: a request's blocks go in when its prefill ends (its KV exists
  from then on). Blocks are added in chain order; when the cache is full the
  least recently used unpinned block not of this chain is evicted, and when
  none can be the rest of the chain is left out (a radix tree grows from the
  root: a block after a missing one could never be matched).
* **eviction order** is leaf first, as SGLang's radix cache evicts leaves by
  last access time: every use touches the chain's blocks from the last to the
  first, so a block is always at least as recent as any block after it in a
  chain and the least recently used block is never one another cached block
  depends on.
* **pins** (``acquire`` / ``release``): blocks a running request uses cannot
  be evicted (SGLang locks the matched nodes of a running request).

``cached_tokens`` turns a match into tokens: whole blocks, capped at the
request's input minus one token, so at least one token is always computed
(a prefill must produce the first token's logits; SGLang and vLLM both leave
the last prompt token uncached on a full hit).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Sequence

from traffic.model._check import int_at_least, real_at_least
from traffic.model.errors import TrafficError

BLOCK_TOKENS = 512  # Mooncake's hash_ids block size


def cached_tokens(blocks: int, input_tokens: int) -> int:
    """Tokens a match of ``blocks`` whole blocks saves a request of ``input_tokens``: blocks x 512, at most
    input - 1 (at least one token is computed)."""
    return max(0, min(blocks * BLOCK_TOKENS, input_tokens - 1))


def assumed_cached_tokens(fraction: float, input_tokens: int) -> int:
    """The cached tokens of a request without ``hash_ids`` under an assumed hit fraction: floor(fraction x
    input) rounded down to whole 512-token blocks (as a block cache can only hold whole blocks, and as the
    ``hash_ids`` path counts), at most input - 1."""
    real_at_least("prefix_hit", fraction, 0.0)
    if fraction > 1:
        raise TrafficError(f"prefix_hit {fraction!r} is not allowed; expected a fraction in [0, 1]", key="prefix_hit")
    return cached_tokens(math.floor(fraction * input_tokens) // BLOCK_TOKENS, input_tokens)


class Holders:
    """Which caches of a group hold each block, kept up to date by the caches (``PrefixCache(holders=...)``):
    ``matches`` gives every cache's ``match`` of a chain in one walk of the chain instead of one walk per cache
    (KV-aware routing asks it of every prefill unit for every request: 1,024 units at n = 16,384)."""

    def __init__(self) -> None:
        self.of: dict = {}  # block id -> the owner holding it, or the set of owners when several do
        self.owners: set = set()

    def add(self, block: int, owner) -> None:
        held = self.of.get(block)
        if held is None:
            self.of[block] = owner  # most blocks are one session's, in one cache: no set for them
        elif isinstance(held, set):
            held.add(owner)
        elif held != owner:
            self.of[block] = {held, owner}

    def drop(self, block: int, owner) -> None:
        held = self.of[block]
        if not isinstance(held, set):
            del self.of[block]
            return
        held.discard(owner)
        if len(held) == 1:
            self.of[block] = held.pop()

    def matches(self, chain: Sequence[int]) -> dict:
        """Owner -> how many leading blocks of ``chain`` its cache holds (``PrefixCache.match``), for every owner
        holding at least the first."""
        out: dict = {}
        alive, total = self.owners, len(self.owners)
        for depth, b in enumerate(chain):
            held = self.of.get(b)
            if held is None:
                break
            if not isinstance(held, set):
                held = {held}
            if len(held) == total:  # every cache holds it (a shared system prompt): nobody's match stops here
                continue
            kept = alive & held
            if len(kept) != len(alive):
                for owner in alive - kept:
                    out[owner] = depth
                alive = kept
                if not alive:
                    return out
        else:
            depth = len(chain)
        for owner in alive:
            out[owner] = depth
        return out


def hit_ratios(input_tokens: int, cached_tokens: int, host_tokens: int) -> dict:
    """The prefix cache's token-weighted hit ratios over some requests, from their prompt tokens, those their
    prefill unit had cached and, of those, the ones only its host tier held (HiCache): ``hit_rate`` (cached over
    prompt tokens), ``device_hit_rate`` (found in the GPU's own pool) and ``host_hit_rate`` (loaded from the host
    tier); the two tiers add up to the whole. None without a prompt token."""
    if not input_tokens:
        return {"hit_rate": None, "device_hit_rate": None, "host_hit_rate": None}
    return {"hit_rate": round(cached_tokens / input_tokens, 4),
            "device_hit_rate": round((cached_tokens - host_tokens) / input_tokens, 4),
            "host_hit_rate": round(host_tokens / input_tokens, 4)}


class PrefixCache:
    """LRU block cache with radix semantics (module docstring)."""

    def __init__(self, capacity: int | None, holders: Holders | None = None, owner=None) -> None:
        """``holders``: a group's index this cache reports its blocks to, as ``owner``."""
        if capacity is not None:
            int_at_least("prefix cache capacity (blocks)", capacity, 0)
        self.capacity = capacity
        self._lru: OrderedDict[int, None] = OrderedDict()  # oldest first
        self._pins: dict[int, int] = {}
        self.evictions = 0
        self.peak = 0  # the most blocks ever held
        self._holders, self._owner = holders, owner
        if holders is not None:
            holders.owners.add(owner)

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, block: int) -> bool:
        return block in self._lru

    @property
    def pinned(self) -> int:
        """Blocks pinned by running requests (not evictable)."""
        return len(self._pins)

    def blocks(self) -> list[int]:
        """The cached block ids, least recently used first."""
        return list(self._lru)

    def match(self, chain: Sequence[int]) -> int:
        """How many leading blocks of ``chain`` are cached (no side effect)."""
        n = 0
        for b in chain:
            if b not in self._lru:
                break
            n += 1
        return n

    def _touch(self, chain: Sequence[int]) -> None:
        for b in reversed(chain):  # the first block ends most recent: leaf-first eviction
            self._lru.move_to_end(b)

    def acquire(self, chain: Sequence[int], n: int) -> None:
        """Pin (and touch) the first ``n`` blocks of ``chain``, which must be cached."""
        head = list(chain[:n])
        if len(head) != n or any(b not in self._lru for b in head):
            raise TrafficError(f"acquire of {n} blocks that are not all cached; expected a matched prefix")
        for b in head:
            self._pins[b] = self._pins.get(b, 0) + 1
        self._touch(head)

    def release(self, chain: Sequence[int], n: int) -> None:
        """Unpin the first ``n`` blocks of ``chain`` (pinned by ``acquire``)."""
        for b in chain[:n]:
            left = self._pins.get(b, 0) - 1
            if left < 0:
                raise TrafficError(f"release of block {b} that is not pinned; expected acquire first")
            if left:
                self._pins[b] = left
            else:
                del self._pins[b]

    def _evict_one(self, keep: set[int]) -> bool:
        for b in self._lru:
            if b not in self._pins and b not in keep:
                del self._lru[b]
                if self._holders is not None:
                    self._holders.drop(b, self._owner)
                self.evictions += 1
                return True
        return False

    def trim(self, capacity: int) -> bool:
        """Evict unpinned blocks, least recently used first, until at most ``capacity`` remain; False if the
        pinned blocks alone are more (then nothing is evicted)."""
        if self.pinned > capacity:
            return False
        while len(self._lru) > capacity:
            self._evict_one(set())
        return True

    def insert(self, chain: Sequence[int]) -> int:
        """Add ``chain``'s blocks (module docstring); returns how many were new."""
        keep = set(chain)
        added = 0
        for b in chain:
            if b in self._lru:
                continue
            if self.capacity is not None and len(self._lru) >= self.capacity and not self._evict_one(keep):
                break
            self._lru[b] = None
            if self._holders is not None:
                self._holders.add(b, self._owner)
            added += 1
        self._touch(chain[:self.match(chain)])
        self.peak = max(self.peak, len(self._lru))
        return added


__all__ = ["PrefixCache", "Holders", "BLOCK_TOKENS", "cached_tokens", "assumed_cached_tokens", "hit_ratios"]
