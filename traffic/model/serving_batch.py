"""The serving cluster's batched exchange path (``traffic.model.serving.Cluster(batched=True)``).

A decode step's expert-parallel phase is ~70 messages at n=512 and ~4M a cluster second at n=16,384: one Python
``Message`` object, three dict entries and one ``delivered`` call each cost more than a flow-level network spends
on them. The batched path draws a phase's pair counts and cuts its messages as arrays and hands the network one
``Exchange`` action per phase; the network reports the phase's last arrival once (``Cluster.exchange_delivered``).
Everything else is the per-message path's: the same random draws in the same order (numpy's vectorised
``binomial`` consumes the generator as the scalar calls in ``HitTable.tokens`` do), the same message ids, sizes and
slices, the same step records; the unit tests hold the two paths equal.
"""

from __future__ import annotations

import numpy as np

from traffic.model.expert import HitTable
from traffic.model.serving_events import Exchange


class PairTable:
    """An engine's GPU pairs and their per-token shares as arrays, in ``HitTable.share``'s order."""

    def __init__(self, hits: HitTable) -> None:
        pairs = list(hits.share.items())
        self.a = np.array([p[0][0] for p in pairs], dtype=np.int64)
        self.b = np.array([p[0][1] for p in pairs], dtype=np.int64)
        self.p = np.minimum(1.0, np.array([p[1] for p in pairs], dtype=np.float64))
        self.draws = hits.draws
        self.senders, self.sender_of = np.unique(self.a, return_inverse=True)
        self.senders = self.senders.tolist()
        order = np.lexsort((self.b, self.a))  # the per-message path walks the pairs sorted
        self.rank = np.empty_like(order)
        self.rank[order] = np.arange(len(order))

    def draw(self, tokens_per_gpu: dict[int, int], rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        """(a, b, token copies) of the pairs with any, sorted by (a, b): ``HitTable.tokens``'s draw."""
        n = np.array([tokens_per_gpu.get(g, 0) for g in self.senders], dtype=np.int64)[self.sender_of] * self.draws
        live = n > 0
        c = np.zeros(len(n), dtype=np.int64)
        c[live] = rng.binomial(n[live], self.p[live])
        keep = np.flatnonzero(c)
        keep = keep[np.argsort(self.rank[keep], kind="stable")]
        return self.a[keep], self.b[keep], c[keep]


def exchange(pairs: tuple[np.ndarray, ...], kind: str, per_token: int, gpus_per_server: int, bytes_scale: float,
             chunk_bytes: int | None, engine: str, step: int, first_id: int) -> tuple[Exchange, int, int]:
    """The phase's messages (``Exchange``) and its (EP bytes, NVLink bytes), real: pairs on one server ride
    NVLink; every other pair's real bytes as emulated bytes, cut into ``chunk_bytes`` slices (``Cluster._messages``)."""
    a, b, n = pairs
    src, dst = (a, b) if kind == "dispatch" else (b, a)
    real = n * per_token
    same = (src - 1) // gpus_per_server == (dst - 1) // gpus_per_server
    nvlink, ep = int(real[same].sum()), int(real[~same].sum())
    src, dst, real = src[~same], dst[~same], real[~same]
    emulated = np.maximum(1, np.rint(real / bytes_scale)).astype(np.int64)
    size = np.full(len(emulated), chunk_bytes, dtype=np.int64) if chunk_bytes else emulated
    slices = -(-emulated // size)
    first = np.repeat(np.cumsum(slices) - slices, slices)
    k = np.arange(int(slices.sum()), dtype=np.int64) - first  # the slice's index within its pair's message
    whole = np.repeat(emulated, slices)
    cut = np.repeat(size, slices)
    nbytes = np.minimum(cut, whole - k * cut)
    ex = Exchange(engine, kind, step, first_id, np.repeat(src, slices), np.repeat(dst, slices), nbytes,
                  np.repeat(real, slices))
    return ex, ep, nvlink


__all__ = ["PairTable", "exchange"]
