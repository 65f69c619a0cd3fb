"""Named workloads: the requests a serving run draws, each with where it comes from.

* ``azure-conversation``: the shipped Azure LLM inference trace 2023,
  conversation (``data/traces/azure2023_conv.csv.gz``; Splitwise, ISCA 2024):
  ~1.2k-token prompts, ~210 output tokens, no ``hash_ids`` (a prefix hit only
  through ``ServingSpec.prefix_hit``).
* ``mooncake-conversation``: the shipped Mooncake conversation trace
  (``data/traces/mooncake_conversation.jsonl.gz``; kvcache-ai/Mooncake,
  FAST'25) with its real ``hash_ids`` of 512-token blocks: ~7k-token median
  prompts; on an unbounded cache, in trace order, 37.4 % of its prompt tokens
  are a cached prefix (``realised_hit``).
* ``agentic-coding``: generated sessions of a long-context coding agent,
  seeded, shaped to NVIDIA Dynamo's GLM-5.2 recipe's benchmark workload
  (docs.nvidia.com/dynamo/dev/recipes/glm-5-2: "an agentic workload (64K
  median ISL / 400 median OSL, 90% KV cache hit rate)"; its benchmark
  replays a Mooncake-format trace, ``64k_400_90kv_agent_new_noschedule_short_15perc.jsonl``,
  ai-dynamo/dynamo ``recipes/glm-5.2/perf/README.md``).

``agentic-coding``, how it is drawn (``AgenticShape``; each choice and its
source):

* A session is a sequence of turns; turn t's prompt is turn t-1's prompt,
  plus turn t-1's output, plus the tool results and user text of turn t
  (vLLM's Codex / SWE-bench Pro traces, blog.vllm.ai 2026-05-06 "Serving
  Agentic Workloads at Scale with vLLM x Mooncake": context grows every turn,
  "each turn typically introduces only a few hundred to a few thousand new
  tokens. The rest is prefix that the model has already seen").
* Every session starts with the same system prompt, 20,480 tokens (40
  blocks) shared by all sessions: vLLM's synthetic workload "chosen to align
  with the original Codex workload" has "20K common tokens (system
  instructions)"; Claude Code traces (huggingface.co/datasets/
  semianalysisai/cc-traces-weka-042026) carry ~2.8-4.2k system and ~12.4-13k
  tool-definition tokens, the same order. Then the task: lognormal, median
  10,000 tokens (the same vLLM workload: "10K tokens first input"), sigma 0.5.
* Output tokens a turn: lognormal, median 400 (Dynamo), sigma 0.8 (no
  published spread found: an assumption), rescaled so the workload's median
  is 400.
* New tokens a later turn (tool output, user text): lognormal, sigma 1.0
  (tool outputs are heavy-tailed: a file read against a one-line status; an
  assumption), its median scaled (bisection) so that the workload's median
  prompt is Dynamo's 64K, read as 64,000 tokens (the recipe's other figures,
  400 and its 250000 context, are decimal). With the defaults it comes out at
  ~3.8k, mean ~6.3k: "a few thousand".
* Turns a session: lognormal, median 10, sigma 0.5. Given the rest, the
  median number of turns is what sets the hit on an unbounded cache (each
  turn recomputes only its new tokens, its predecessor's output and the
  partial last block): 10 gives 89.6-90.3 % over seeds 0-3 (Dynamo: 90 %;
  8 turns give 87 %, 13 give 92.5 %). vLLM's Codex traces have a median of
  33 turns at 94.2 % with contexts of 12K -> 80K; Dynamo's trace, 64K at
  90 %, has shorter sessions of bigger steps. The generated workload's mean
  input over mean output comes out at ~132:1 (vLLM's Codex traces: "131:1").
* A session ends early when its next prompt would pass 200,000 tokens
  (GLM-5.1's 200K context window, the model the service studied ran).
* Block ids (``hash_ids``): the system prompt's 40 blocks are ids 0-39 in
  every session; a session's own blocks follow, each new full block a new
  id; a turn reuses its predecessor's full blocks and its last partial block
  is a new id (its content grew). So on an unbounded cache turn t hits its
  predecessor's whole prompt up to the last full block, a first turn the
  system prompt.
* Arrival times are all 0: the workload is for the closed loop, where a
  session's next turn arrives as its previous one ends (``think_s`` after;
  Dynamo's trace is replayed at a fixed concurrency without its timestamps,
  "noschedule").
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traffic.model._check import int_at_least, one_of
from traffic.model.prefix_cache import BLOCK_TOKENS, PrefixCache, cached_tokens
from traffic.model.traces import Request, read_trace

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # "trace" (a shipped file) or "generated"
    source: str
    path: str | None = None  # repository-relative, for a trace


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("azure-conversation", "trace", "Azure LLM inference trace 2023, conversation (Azure/AzurePublicDataset; "
             "Splitwise, ISCA 2024): ~1.2k-token prompts, ~210 output tokens, no hash_ids",
             "data/traces/azure2023_conv.csv.gz"),
    Workload("mooncake-conversation", "trace", "Mooncake conversation trace (kvcache-ai/Mooncake, FAST'25) with its "
             "hash_ids of 512-token blocks: 37.4 % of prompt tokens a cached prefix on an unbounded cache",
             "data/traces/mooncake_conversation.jsonl.gz"),
    Workload("agentic-coding", "generated", "NVIDIA Dynamo's GLM-5.2 recipe workload: 64K median ISL, 400 median "
             "OSL, 90 % KV cache hit rate; sessions shaped after vLLM's Codex/SWE-bench Pro traces"),
)}


@dataclass(frozen=True)
class AgenticShape:
    """The ``agentic-coding`` generator's parameters (module docstring)."""

    median_input: int = 64_000
    median_output: int = 400
    system_tokens: int = 20_480
    first_median: float = 10_000.0
    first_sigma: float = 0.5
    output_sigma: float = 0.8
    new_sigma: float = 1.0
    turns_median: float = 10.0
    turns_sigma: float = 0.5
    max_context: int = 200_000


AGENTIC = AgenticShape()


def agentic_coding(n_requests: int = 10_000, seed: int = 0, shape: AgenticShape = AGENTIC) -> list[Request]:
    """``n_requests`` turns of generated agentic-coding sessions (module docstring), in session order."""
    int_at_least("n_requests", n_requests, 1)
    if shape.system_tokens % BLOCK_TOKENS:
        raise ValueError(f"system_tokens {shape.system_tokens} is not whole 512-token blocks")
    rng = np.random.default_rng(seed)
    drawn: list[tuple[np.ndarray, np.ndarray, float]] = []  # per session: new-token and output draws, task
    total = 0
    while total < 1.5 * n_requests:  # enough that sessions cut at the context limit still give n_requests
        turns = max(1, int(round(rng.lognormal(math.log(shape.turns_median), shape.turns_sigma))))
        first = float(rng.lognormal(math.log(shape.first_median), shape.first_sigma))
        new = rng.lognormal(0.0, shape.new_sigma, turns)  # median 1, scaled below
        out = rng.lognormal(math.log(shape.median_output), shape.output_sigma, turns)
        drawn.append((new, out, first))
        total += turns
    # every session's turns end to end (the bisection below builds the workload ~110 times: in numpy, not a
    # Python loop over every turn; np.rint rounds half to even, as round() does)
    new_all = np.concatenate([d[0] for d in drawn])
    out_all = np.concatenate([d[1] for d in drawn])
    lengths = np.array([len(d[0]) for d in drawn])
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    session = np.repeat(np.arange(len(drawn)), lengths)
    turn = np.arange(len(new_all)) - starts[session]
    opening = shape.system_tokens + np.maximum(1, np.rint([d[2] for d in drawn])).astype(np.int64)

    def build(new_scale: float, out_scale: float) -> tuple[np.ndarray, ...]:
        """(session, turn, input, output) of the first n_requests turns, as arrays: a turn's prompt is its
        predecessor's plus that one's output plus its own new tokens; a session stops before the first turn
        whose prompt would pass the context limit (prompts only grow, so those are the turns over it)."""
        outputs = np.maximum(1, np.rint(out_all * out_scale)).astype(np.int64)
        step = np.empty_like(outputs)
        step[1:] = outputs[:-1] + np.maximum(1, np.rint(new_all[1:] * new_scale)).astype(np.int64)
        step[starts] = opening
        grown = np.cumsum(step)
        context = grown - (grown[starts] - opening)[session]
        kept = np.flatnonzero(context <= shape.max_context)[:n_requests]
        return session[kept], turn[kept], context[kept], outputs[kept]

    def fit(out_scale: float) -> float:
        lo, hi = 1.0, 1e6  # tokens: the new tokens' median
        for _ in range(36):  # on a log scale: hi / lo ends within 1e-9 of 1
            mid = math.sqrt(lo * hi)
            if np.median(build(mid, out_scale)[2]) < shape.median_input:
                lo = mid
            else:
                hi = mid
        return hi

    out_scale = 1.0
    for _ in range(2):  # the outputs' median over the turns kept, then the new tokens' for the inputs'
        new_scale = fit(out_scale)
        kept = build(new_scale, out_scale)
        out_scale *= shape.median_output / float(np.median(kept[3]))
    rows = list(zip(*(a.tolist() for a in build(fit(out_scale), out_scale))))
    return _with_blocks(rows, shape)


def _with_blocks(rows: list[tuple[int, int, int, int]], shape: AgenticShape) -> list[Request]:
    """Requests with their block chains (module docstring)."""
    system = list(range(shape.system_tokens // BLOCK_TOKENS))
    next_id = len(system)
    full: dict[int, list[int]] = {}  # session -> ids of its full blocks so far
    out = []
    for i, (s, t, tokens, output) in enumerate(rows):
        blocks = full.setdefault(s, list(system))
        grown = tokens // BLOCK_TOKENS - len(blocks)
        if grown > 0:
            blocks.extend(range(next_id, next_id + grown))
            next_id += grown
        chain = blocks[:tokens // BLOCK_TOKENS]
        if tokens % BLOCK_TOKENS:  # the partial last block: new content every turn
            chain = chain + [next_id]
            next_id += 1
        out.append(Request(i, 0.0, tokens, output, tuple(chain), session=s, turn=t))
    return out


def realised_hit(requests: list[Request], capacity_blocks: int | None = None) -> float:
    """The share of prompt tokens that are a cached prefix when the requests run one after the other on one
    cache (unbounded by default): each request's hit, then its blocks inserted."""
    cache = PrefixCache(capacity_blocks)
    hit = total = 0
    for r in requests:
        hit += cached_tokens(cache.match(r.hash_ids), r.input_tokens)
        total += r.input_tokens
        cache.insert(r.hash_ids)
    return hit / total if total else 0.0


GENERATED_REQUESTS = 10_000  # a generated workload's size when the experiment names none (trace.first_n)


@functools.lru_cache(maxsize=8)
def _generated(n_requests: int, seed: int, shape: AgenticShape) -> tuple[Request, ...]:
    """A generated workload, drawn once per process for each (size, seed, shape): a run asks for the same
    one several times (its count, every repetition's preparation)."""
    return tuple(agentic_coding(n_requests, seed, shape))


def workload_requests(name: str, *, seed: int = 0, n_requests: int | None = None,
                      root: Path | None = None, shape: dict | None = None) -> list[Request]:
    """The requests of a named workload: a shipped trace's (the first ``n_requests``; paths from the
    repository root, or ``root``) or ``n_requests`` generated ones (``GENERATED_REQUESTS`` by default) from
    ``seed``, with ``shape`` (``AgenticShape`` fields) set otherwise."""
    w = WORKLOADS[one_of("workload", name, WORKLOADS)]
    if w.kind == "generated":
        from dataclasses import replace

        n = GENERATED_REQUESTS if n_requests is None else n_requests
        return list(_generated(n, seed, replace(AGENTIC, **(shape or {}))))
    requests = read_trace((root or REPO) / w.path).requests
    return requests if n_requests is None else requests[:int_at_least("n_requests", n_requests, 1)]


__all__ = ["Workload", "WORKLOADS", "AgenticShape", "AGENTIC", "GENERATED_REQUESTS", "agentic_coding", "realised_hit",
           "workload_requests"]
