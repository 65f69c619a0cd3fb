"""Turn one request's KV cache into GPU-to-GPU transfers (README rules).

GQA, by TP ratio (p = prefill TP, d = decode TP; one must divide the other):
* p == d: prefill rank i sends its slice to decode rank i.
* d = p * r: decode rank j takes its heads from prefill rank j // r (1/r of
  that rank's heads).
* p = d * r: decode rank j receives from prefill ranks j*r .. j*r+r-1.

Replicated heads (tp > kv_heads): each decode rank still receives every head
it holds, so a head replicated on k decode ranks is sent k times (each
replica pulls its own copy, as in SGLang/vLLM). When several prefill ranks in
the source set hold the same replicated head, the lowest-numbered one sends
it and the other replicas stay idle (no byte is sent twice to one rank).
Thus the bytes a decode rank receives always equal
``kv_bytes_per_token_per_rank(model, dtype, d) * tokens``.

MLA: the KV is identical on every rank; one prefill rank sends a full copy to
every decode rank. ``mla_sender="rank0"`` (default) uses prefill rank 0 (SGLang with MLA: the KV is
retrieved "from only one prefill rank"), ``"rotate"`` uses rank request_id mod p to spread the sending
NICs over requests, ``"layersplit"`` has every prefill rank send its share of the layers of every
request (Z.ai's LayerSplit: each GPU keeps only some layers' KV, so each rank's NIC carries 1/p).
DP-attention (one GPU to one GPU) is modelled with TP-1 instances.

``tokens`` is what the caller moves: ``traffic.model.serving`` passes a
request's whole input (a prefill prefix-cache hit saves compute, not
transfer: the decode side has none of the KV), or with a decode-side prefix
cache only the tokens past the decode unit's hit.
"""

from __future__ import annotations

from dataclasses import dataclass

from traffic.model._check import int_at_least, one_of
from traffic.model.errors import TrafficError
from traffic.model.models import ModelSpec, bytes_per_head_per_token, check_tp, kv_bytes_per_token, rank_heads
from traffic.model.placement import Instance

MLA_SENDERS = ("rank0", "rotate", "layersplit")


@dataclass(frozen=True, slots=True)
class Transfer:
    """Bytes one GPU sends to another for one request (real, unscaled bytes)."""

    src_gpu: int
    dst_gpu: int
    bytes: int


def source_ranks(prefill_tp: int, decode_tp: int, decode_rank: int) -> range:
    """Prefill ranks a decode rank pulls from under the README TP rules."""
    if decode_tp >= prefill_tp:
        if decode_tp % prefill_tp:
            raise TrafficError(f"decode TP {decode_tp} is not a multiple of prefill TP {prefill_tp}; "
                               "expected one TP to divide the other")
        first = decode_rank // (decode_tp // prefill_tp)
        return range(first, first + 1)
    if prefill_tp % decode_tp:
        raise TrafficError(f"prefill TP {prefill_tp} is not a multiple of decode TP {decode_tp}; "
                           "expected one TP to divide the other")
    r = prefill_tp // decode_tp
    return range(decode_rank * r, decode_rank * r + r)


def kv_transfers(tokens: int, model: ModelSpec, dtype: str, prefill: Instance, decode: Instance,
                 request_id: int = 0, mla_sender: str = "rank0") -> list[Transfer]:
    """GPU-level transfers moving ``tokens`` tokens of KV from ``prefill`` to ``decode``.

    Ordered by decode rank, then prefill rank; pairs with zero bytes omitted.
    """
    int_at_least("tokens", tokens, 0)
    one_of("mla_sender", mla_sender, MLA_SENDERS)
    if prefill.kind != "prefill" or decode.kind != "decode":
        raise TrafficError(f"instances {prefill.kind}/{decode.kind} given; expected prefill then decode")
    p, d = check_tp(model, prefill.tp), check_tp(model, decode.tp)
    if tokens == 0:
        return []
    if model.attention == "mla":
        full = kv_bytes_per_token(model, dtype) * tokens
        if mla_sender == "layersplit":  # rank r holds and sends layers [L*r/p, L*(r+1)/p) of every token
            shares = [(model.layers * (r + 1)) // p - (model.layers * r) // p for r in range(p)]
            return [Transfer(prefill.gpus[r], dst, full * n // model.layers) for dst in decode.gpus
                    for r, n in enumerate(shares) if n]
        sender = 0 if mla_sender == "rank0" else request_id % p
        return [Transfer(prefill.gpus[sender], dst, full) for dst in decode.gpus]
    per_head = bytes_per_head_per_token(model, dtype) * tokens
    out: list[Transfer] = []
    for j in range(d):
        sources = source_ranks(p, d, j)
        counts: dict[int, int] = {}
        for head in rank_heads(model, d, j):
            holder = next((i for i in sources if head in rank_heads(model, p, i)), None)
            if holder is None:  # cannot happen for valid TP pairs; guard the invariant
                raise TrafficError(f"no prefill rank among {list(sources)} holds head {head} for "
                                   f"decode rank {j}; expected a valid TP pair")
            counts[holder] = counts.get(holder, 0) + 1
        out.extend(Transfer(prefill.gpus[i], decode.gpus[j], n * per_head)
                   for i, n in sorted(counts.items()))
    return out


__all__ = ["Transfer", "kv_transfers", "source_ranks", "MLA_SENDERS"]
