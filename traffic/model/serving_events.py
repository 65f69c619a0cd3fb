"""What the cluster model (``traffic.model.serving``) emits and records: the messages it asks the network to
carry, its actions (send a message, set a timer), each request's life with the parts of its TTFT, and each
engine step."""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("kv", "dispatch", "combine")
# the parts of a request's TTFT, in the order they happen (RequestState's *_s fields of the same names)
TTFT_PARTS = ("decode_memory", "prefill_queue", "prefill_compute", "prefill_exchange", "kv_transfer",
              "decode_wait", "decode_compute", "decode_exchange")
STEP_PARTS = ("compute", "dispatch", "combine")  # a decode step's parts


@dataclass(frozen=True, slots=True)
class Message:
    """One message the network must carry: emulated ``bytes`` from src to dst GPU."""

    id: int
    kind: str  # kv | dispatch | combine
    src_gpu: int
    dst_gpu: int
    bytes: int
    real_bytes: int
    request_id: int | None
    engine: str  # e.g. "decode0"
    step: int | None
    slice_index: int = 0


@dataclass(frozen=True, slots=True)
class Send:
    message: Message


@dataclass(frozen=True, slots=True)
class Exchange:
    """One expert-parallel phase's messages as arrays (``Cluster(batched=True)``: ``traffic.model.serving_batch``):
    message ``first_id + i`` carries ``bytes[i]`` emulated bytes (``real_bytes[i]`` real) from GPU ``src[i]`` to
    ``dst[i]``; the phase ends when its last one has arrived (``Cluster.exchange_delivered``)."""

    engine: str  # e.g. "decode0"
    kind: str  # dispatch | combine
    step: int
    first_id: int
    src: object  # numpy int arrays, one entry per message
    dst: object
    bytes: object
    real_bytes: object

    def __len__(self) -> int:
        return len(self.bytes)


@dataclass(frozen=True, slots=True)
class Timer:
    at: float
    key: tuple


@dataclass
class RequestState:
    """One request's life; times in real-cluster seconds, None until they happen."""

    id: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    session: int | None = None
    turn: int = 0
    cached_tokens: int = 0  # prompt tokens its prefill unit had cached (not computed)
    host_tokens: int = 0  # of those, tokens loaded from the host tier (HiCache) into the GPU
    cache_estimate: int = 0  # what the router expected cached when it queued the request
    pinned_blocks: int = 0  # prefill cache blocks it holds pinned while prefilled
    kv_tokens: int = 0  # tokens whose KV moved to its decode unit
    decode_cached_tokens: int = 0  # tokens its decode unit had cached (decode_prefix_cache)
    decode_pinned_blocks: int = 0
    kv_alloc_tokens: int = 0  # tokens of its decode unit's KV pool it holds (decode_memory)
    prefill_unit: tuple[int, int] | None = None  # (engine, unit)
    decode_unit: tuple[int, int] | None = None
    prefilled_tokens: int = 0
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    kv_bytes: int = 0
    kv_pending: int = 0
    kv_end_s: float | None = None
    first_token_s: float | None = None
    done_s: float | None = None
    tokens_out: int = 0
    # TTFT's parts (TTFT_PARTS), attributed as they happen: every moment from arrival to the end of
    # prefill is the wait for decode memory, the queue or a prefill step the request was in (its compute, then
    # its exchange)
    decode_memory_s: float = 0.0
    prefill_queue_s: float = 0.0
    prefill_compute_s: float = 0.0
    prefill_exchange_s: float = 0.0
    decode_wait_s: float | None = None
    decode_compute_s: float | None = None
    decode_exchange_s: float | None = None
    attributed_to_s: float | None = None  # the time up to which the prefill parts account for it

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def kv_transfer_s(self) -> float | None:
        return None if self.kv_end_s is None or self.prefill_end_s is None else self.kv_end_s - self.prefill_end_s

    def parts(self) -> dict[str, float] | None:
        """TTFT_PARTS in seconds (None before the first token); they add up to ``ttft_s``."""
        if self.first_token_s is None:
            return None
        return {"decode_memory": self.decode_memory_s, "prefill_queue": self.prefill_queue_s,
                "prefill_compute": self.prefill_compute_s,
                "prefill_exchange": self.prefill_exchange_s, "kv_transfer": self.kv_transfer_s,
                "decode_wait": self.decode_wait_s, "decode_compute": self.decode_compute_s,
                "decode_exchange": self.decode_exchange_s}

    def row(self) -> dict:
        return {"request_id": self.id, "session": self.session, "turn": self.turn, "arrival_s": self.arrival_s,
                "input_tokens": self.input_tokens, "cached_tokens": self.cached_tokens, "host_tokens": self.host_tokens,
                "output_tokens": self.output_tokens, "tokens_out": self.tokens_out,
                "prefill_engine": None if self.prefill_unit is None else self.prefill_unit[0],
                "decode_engine": None if self.decode_unit is None else self.decode_unit[0],
                "prefill_start_s": self.prefill_start_s, "prefill_end_s": self.prefill_end_s,
                "kv_tokens": self.kv_tokens, "decode_cached_tokens": self.decode_cached_tokens,
                "kv_bytes": self.kv_bytes, "kv_end_s": self.kv_end_s, "first_token_s": self.first_token_s,
                "done_s": self.done_s, "ttft_s": self.ttft_s,
                **{f"{k}_s": v for k, v in (self.parts() or dict.fromkeys(TTFT_PARTS)).items()}}


@dataclass
class StepRecord:
    """One engine step: when its phases ended and what it carried."""

    engine: str
    step: int
    start_s: float
    tokens: int
    requests: int
    compute_end_s: float | None = None
    dispatch_end_s: float | None = None
    end_s: float | None = None
    ep_bytes: int = 0  # real bytes on the fabric
    nvlink_bytes: int = 0  # real bytes between GPUs of one server (not emulated)
    messages: int = 0
    dispatch_last_id: int | None = None  # the message whose arrival ended the dispatch (the phase's slowest)
    combine_last_id: int | None = None

    def row(self) -> dict:
        exchange = None if self.end_s is None or self.compute_end_s is None else self.end_s - self.compute_end_s
        return {"engine": self.engine, "step": self.step, "start_s": self.start_s,
                "compute_end_s": self.compute_end_s, "dispatch_end_s": self.dispatch_end_s, "end_s": self.end_s,
                "exchange_s": exchange, "tokens": self.tokens, "requests": self.requests,
                "ep_bytes": self.ep_bytes, "nvlink_bytes": self.nvlink_bytes, "messages": self.messages,
                "dispatch_last_id": self.dispatch_last_id, "combine_last_id": self.combine_last_id}


__all__ = ["Message", "Send", "Exchange", "Timer", "RequestState", "StepRecord", "KINDS", "TTFT_PARTS", "STEP_PARTS"]
