"""A repetition's settings: the sections of the experiment file it takes, as pydantic models.

The experiment (``testbed.experiment.schema.Experiment``) is made of these sections and a few
top-level keys; a repetition gets them as they are (``testbed.repetition.spec.RepetitionSpec``).
Every key's default, type, range and description lives here, once: the schema, experiments/schema.json
and the command line's flags (``testbed.cli.flags``) are read from these models.
"""

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from common import scale
from common.errors import TestbedError
from common.paths import DEFAULT_TRACE, REPO
from common.units import parse_rate, parse_seconds, parse_size
from fabrics.routing import DEFAULT_POLICY, POLICIES
from pfc import policy as pfc_policy
from testbed import backends
from testbed.backends.ns3.assumptions import DEFAULT as TWIN
from testbed.backends.ns3.assumptions import TCP as TWIN_TCP
from traffic.model import memory, models, placement, rankmap, schedule, traces, workloads
from traffic.model import serving as serving_model
from traffic.runtime.agent import CONNECTION_MODES

FABRIC_NAMES = ("zcube", "roft")


# ------------------------------------------------------------ value types
def _not_bool(v: Any, what: str) -> None:
    if isinstance(v, bool):
        raise ValueError(f"expected {what}, not a boolean")


def _parse_text(v: Any, what: str, parse) -> Any:
    """Strings go through the CLI's parser (``common.units``; its error becomes a schema error); numbers pass."""
    _not_bool(v, what)
    if isinstance(v, str):
        try:
            return parse(v)
        except TestbedError as exc:
            raise ValueError(str(exc)) from None
    return v


def _rate(v: Any) -> Any:
    """'3mbit' / '500k' / '2' (Mbit/s, as on the CLI) or a number of bit/s."""
    return _parse_text(v, "a rate such as 3mbit or a number of bit/s", parse_rate)


def _size(v: Any) -> Any:
    """60000 / '60kb' / '64KiB' -> bytes."""
    return _parse_text(v, "a size in bytes such as 60000 or 64KiB", parse_size)


def _seconds(v: Any) -> Any:
    """120 / '120s' / '2m' -> seconds."""
    return _parse_text(v, "a duration such as 120 or 2m", parse_seconds)


_UNIT_STRING = {"type": "string", "pattern": r"^\s*[0-9.]+\s*[a-zA-Z]*\s*$"}
Rate = Annotated[float, BeforeValidator(_rate), WithJsonSchema(
    {"anyOf": [{"type": "number"}, _UNIT_STRING],
     "description": "bit/s as a number, or a string with a unit: 3mbit, 500kbit, 1gbit ('3' alone: Mbit/s)"})]
Size = Annotated[int, BeforeValidator(_size), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 0}, _UNIT_STRING],
     "description": "bytes as an integer, or a string with a unit: 60kb, 64KiB"})]
Seconds = Annotated[float, BeforeValidator(_seconds), WithJsonSchema(
    {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": r"^\s*[0-9.]+\s*(s|m|min)?\s*$"}],
     "description": "seconds as a number, or a string: 120s, 2m"})]

FabricName = Literal[FABRIC_NAMES]
TraceFormat = Literal[tuple(traces.FORMATS)]
DType = Literal[tuple(models.DTYPE_BYTES)]
SchedulerName = Literal[tuple(placement.POLICIES)]
Mode = Literal[tuple(schedule.MODES)]
PolicyName = Literal[tuple(POLICIES)]
Connections = Literal[CONNECTION_MODES]
Driver = Literal["plan", "live"]
Arrivals = Literal["trace", "closed"]
Popularity = Literal["uniform", "zipf"]
BackendName = Literal[backends.NAMES]


class _Section(BaseModel):
    # strict: YAML already types its scalars, so "8" for a TP or yes for a seed is a mistake, not a value
    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True, frozen=True)


# --------------------------------------------------------------- sections
class Link(_Section):
    """Every link of the emulated fabric (switch ports and NIC ports)."""

    rate: Rate = Field(scale.DEFAULT_RATE_BPS, description="emulated link rate")
    represents: Rate = Field(scale.REAL_LINK_BPS, gt=0, description="the real link one emulated link stands for "
                             "(bytes are scaled by represents / rate, times stay real); the seed's ablation "
                             "is the same experiment at 100gbit and 200gbit")
    buffer_bytes: Size = Field(scale.DEFAULT_BUFFER_BYTES, description="switch egress buffer per port")
    mtu: int = Field(scale.DEFAULT_MTU, description="576 .. 3500 (AF_XDP frames in OVS are 4 KB)")
    nic_buffer_bytes: Optional[Size] = Field(None, description="host NIC queue; null: 1000 frames (txqueuelen)")
    burst_bytes: Size = Field(scale.DEFAULT_BURST_BYTES, description="shaper burst (link rate token bucket)")
    time_dilation: float = Field(1.0, ge=1, le=100, description="the emulated world runs this many times slower "
                                 "(live driver): bytes scaled by represents / (rate x dilation), every modelled "
                                 "time stretched by it, reported serving times converted back")


class Pfc(_Section):
    """Priority flow control; null thresholds let the datapath compute its defaults."""

    enabled: bool = True
    xoff_bytes: Optional[Size] = Field(None, description="queue depth that sends PAUSE")
    xon_bytes: Optional[Size] = Field(None, description="queue depth that sends RESUME (below xoff_bytes)")
    headroom_bytes: Optional[Size] = Field(None, description="buffer kept for bytes in flight after PAUSE")
    dynamic_alpha: Optional[float] = Field(None, ge=pfc_policy.MIN_DYNAMIC_ALPHA, le=pfc_policy.MAX_DYNAMIC_ALPHA,
                                           description="dynamic threshold: XOFF = alpha x the switch's free shared "
                                                       "buffer; null: static xoff/xon")
    poll_us: Optional[int] = Field(None, ge=pfc_policy.POLL_US_RANGE[0], le=pfc_policy.POLL_US_RANGE[1],
                                   description="how often queue depth is polled, microseconds; null: "
                                               f"{pfc_policy.DEFAULT_POLL_US}")


# where a run's requests come from: a trace file or a named workload, alternatives (docs/experiments.md, "Where
# the requests come from"): ``Trace`` refuses both in one mapping; the experiment's overrides
# (``testbed.experiment.schema.apply_overrides``) let the one set last replace the other
TRACE_SOURCES = ("path", "workload")


class Trace(_Section):
    """Which requests of which trace are replayed."""

    path: Optional[str] = Field(None, description="Mooncake JSONL or Azure CSV, plain or .gz; relative to the "
                                                  "experiment file's folder; null: the shipped "
                                                  "data/traces/mooncake_conversation.jsonl.gz")
    format: TraceFormat = "auto"
    start_s: Seconds = Field(0.0, ge=0, description="trace time where the slice starts")
    duration_s: Seconds = Field(120.0, gt=0, description="trace time replayed (wall time = duration / speed)")
    first_n: Optional[int] = Field(None, ge=1, description="at most this many requests of the slice")
    speed: float = Field(1.5, gt=0, description="replay the slice this many times faster")
    skip_bad: bool = False
    workload: Optional[Literal[tuple(workloads.WORKLOADS)]] = Field(
        None, description="a named workload (docs/serving.md, Workloads) instead of `path`: a shipped trace "
                          "(its file becomes `path`) or generated sessions (agentic-coding: closed loop only; "
                          "`first_n` requests, 10,000 by default, drawn from `workload_seed`); null: `path`")
    workload_seed: int = Field(0, ge=0, description="the seed a generated workload is drawn from (fixed, not the "
                                                    "repetition's: every repetition and fabric serves the same "
                                                    "requests, as with a trace file)")
    agentic_turns: float = Field(workloads.AGENTIC.turns_median, ge=1, le=200,
                                 description="agentic-coding: median turns a session (it sets the prefix hit: 10 "
                                             "gives Dynamo's 90 %, 30 gives 96 %)")
    agentic_first_tokens: float = Field(workloads.AGENTIC.first_median, ge=512, le=190_000,
                                        description="agentic-coding: median tokens of a session's first task after "
                                                    "the shared system prompt")

    @property
    def workload_shape(self) -> dict:
        """The generator's shape fields this section sets (traffic.model.workloads.AgenticShape)."""
        return {"turns_median": self.agentic_turns, "first_median": self.agentic_first_tokens}

    @field_validator("path")
    @classmethod
    def _resolve(cls, v: Optional[str], info: ValidationInfo) -> str:
        if v is None:
            return str(DEFAULT_TRACE)
        p = Path(v).expanduser()
        if not p.is_absolute():
            p = Path((info.context or {}).get("base") or Path.cwd()) / p
        p = Path(os.path.normpath(os.path.abspath(p)))
        expected = "expected a Mooncake JSONL or Azure CSV file (plain or .gz)"
        if p.is_dir():
            raise ValueError(f"trace {p} is a directory: {expected}")
        if not p.is_file():
            raise ValueError(f"trace {p} does not exist: {expected}")
        return str(p)

    @model_validator(mode="before")
    @classmethod
    def _one_source(cls, data: Any) -> Any:
        """A trace file and a named workload are alternatives: both in one mapping is refused, naming both."""
        if isinstance(data, dict) and all(data.get(k) is not None for k in TRACE_SOURCES):
            raise ValueError(f"trace.path and trace.workload are alternatives (a trace file, or a named workload): "
                             f"expected one of them, not both (got path {data['path']!r} and workload "
                             f"{data['workload']!r})")
        return data

    @model_validator(mode="after")
    def _workload_path(self) -> "Trace":
        """A shipped trace's workload names its file; a generated one has none."""
        if self.workload is None:
            return self
        w = workloads.WORKLOADS[self.workload]
        path = str(REPO / w.path) if w.path else None
        if path != self.path:
            object.__setattr__(self, "path", path)
        return self

    @property
    def label(self) -> str:
        """What the requests are, for a line a user reads: the workload's name, or the trace file's."""
        return self.workload or Path(self.path).name

    @property
    def generated(self) -> bool:
        """Requests drawn by a generator (no trace file)."""
        return self.workload is not None and workloads.WORKLOADS[self.workload].kind == "generated"


class Serving(_Section):
    """The serving deployment the KV cache moves in: model, placement, transfer timing."""

    model: str = Field("llama-3.1-70b", json_schema_extra={"enum": list(models.MODELS)},
                       description="GQA models split heads over TP ranks; MLA (deepseek-v3): one prefill rank "
                                   "sends a full copy to every decode rank")
    dtype: DType = "bf16"
    prefill_tp: int = Field(8, ge=1, description="GPUs per prefill instance (a divisor of 8)")
    decode_tp: int = Field(2, ge=1, description="GPUs per decode instance (a divisor of 8)")
    prefill_fraction: float = Field(0.5, gt=0, lt=1, description="share of the servers running prefill")
    scheduler: SchedulerName = "round_robin"
    mode: Mode = Field("whole", description="whole: after prefill; layerwise: one chunk per layer during it")
    chunk_bytes: Optional[Size] = Field(65536, description="slice size in emulated bytes; 0 or null: no slicing")
    policy: PolicyName = Field(DEFAULT_POLICY, description="NIC port selection")
    connections: Connections = Field(
        "persistent", description="persistent: one TCP connection per NIC port pair, reused by every transfer "
                                  "(a transfer engine's queue pair); per-transfer: a new connection each")
    driver: Driver = Field("plan", description="plan: every KV transfer timed from the trace before the run; "
                                               "live: a coordinator runs prefill and decode steps with the "
                                               "network in the loop (MoE models add expert-parallel traffic)")
    arrivals: Arrivals = Field("trace", description="live: trace-timed arrivals, or closed: `concurrency` "
                                                    "requests in flight, a new one when one ends")
    concurrency: int = Field(64, ge=1, description="closed loop: requests in flight in the whole cluster")
    prefill_ep: Optional[int] = Field(None, ge=1, description="live, MoE: GPUs per prefill EP group; null: all "
                                                              "prefill GPUs")
    decode_ep: Optional[int] = Field(None, ge=1, description="live, MoE: GPUs per decode EP group; null: all "
                                                             "decode GPUs")
    layout: Optional[Literal[tuple(placement.SERVING_LAYOUTS)]] = Field(
        None, description="live, MoE: a published deployment's engines (docs/serving.md, Layouts); null: "
                          "prefill_ep / decode_ep")
    decode_batch: int = Field(256, ge=1, description="live: requests per decode unit and step at most")
    decode_step_s: Seconds = Field(0.030, ge=0, description="live: modelled compute of one decode step")
    prefill_chunk_tokens: int = Field(512, ge=1, description="live: prefill tokens per unit and step at most")
    popularity: Popularity = Field("uniform", description="live, MoE: expert popularity (zipf: skewed)")
    zipf_s: float = Field(1.0, ge=0, description="live, MoE: Zipf exponent with popularity zipf")
    warmup_s: Seconds = Field(0.0, ge=0, description="live: requests arriving earlier are not measured")
    prefix_cache: bool = Field(False, description="live: a prefix cache per prefill unit over the requests' "
                                                  "hash_ids (512-token blocks, LRU; its size from the GPU's memory); "
                                                  "a hit saves prefill compute, not KV transfer")
    prefix_hit: Optional[float] = Field(None, ge=0, le=1, description="live: the cached share of a request "
                                        "without hash_ids (whole blocks); null: none")
    prefill_routing: Literal[tuple(serving_model.ROUTINGS)] = Field(
        "kv", description="live: kv (the unit with the least prefill work left there, cache hits counted: "
                          "Dynamo's KV router) or least-loaded")
    decode_prefix_cache: bool = Field(False, description="live: decode units cache blocks too and only the delta's "
                                                         "KV moves (SGLang's decode radix cache); false: the whole "
                                                         "context moves")
    decode_memory: bool = Field(False, description="live: a decode GPU holds its requests' KV; a request waits for "
                                                   "memory (a TTFT part of its own)")
    gpu: Literal[tuple(memory.GPUS)] = Field("h200", description="live: the GPU whose memory sizes the prefix "
                                                                 "cache and the decode KV pool")
    weights_dtype: DType = Field("fp8", description="live: bytes a weight takes (the model's parameters per GPU)")
    prefill_mem_fraction: float = Field(0.92, gt=0, le=1, description="live: share of a prefill GPU's memory for "
                                        "weights + KV (SGLang's mem_fraction_static)")
    decode_mem_fraction: float = Field(0.95, gt=0, le=1, description="live: the same for a decode GPU")
    warm_start: bool = Field(False, description="live, closed loop: start as if the cluster had been serving for a "
                             "while: each session joins at a random turn with its earlier turns' prefix cached, the "
                             "first turns spread over the time prefill needs for their new tokens (a shorter "
                             "warm-up than every session at turn 0 at once)")
    hicache_ratio: float = Field(0.0, ge=0, le=64, description="live, prefix_cache: a host-memory tier behind each "
                                 "prefill cache of this many times its GPU pool (SGLang HiCache's --hicache-ratio, "
                                 "write-through); a hit only the host holds is loaded at the GPU's host link "
                                 "(PCIe Gen5, 64 GB/s); 0: the GPU pool alone")
    think_s: Seconds = Field(0.0, ge=0, description="live, closed loop with sessions: from a turn's last token to "
                                                    "its session's next turn")
    mla_sender: Literal[tuple(rankmap.MLA_SENDERS)] = Field(
        "rank0", description="MLA models: which prefill ranks send a request's KV: rank0 (SGLang: one rank), "
                             "rotate (rank request_id mod TP), layersplit (every rank its layers: Z.ai's LayerSplit)")

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        try:
            return models.get_model(v).name
        except TestbedError as exc:
            raise ValueError(str(exc)) from None


class Twin(_Section):
    """The ns-3 twin's assumptions about what the emulator does (backend ns3; the other backends ignore it), the
    knobs of issue 38's ablation, one at a time (``testbed.backends.ns3.assumptions``: the defaults are the twin
    as built). Times are on the emulator's clock (wall time there, simulated time here: cluster time x
    link.time_dilation)."""

    burst_bytes: Optional[Size] = Field(
        TWIN.burst_bytes, description="a token bucket per transmitter (switch port, NIC queue) at the link rate: "
                                      "after an idle spell this many bytes leave at once, as the emulator's tbf lets "
                                      "link.burst_bytes (18000 by default) through; null: none, every frame is "
                                      "serialised at the link rate")
    cable_delay_us: float = Field(TWIN.cable_delay_us, ge=0, le=1e6, description="propagation per cable, "
                                                                                 "microseconds")
    hop_delay_us: float = Field(TWIN.hop_delay_us, ge=0, le=1e6, description="a switch's forwarding time per packet "
                                "before its egress queue, microseconds (the emulator's Open vSwitch per hop)")
    send_delay_us: float = Field(TWIN.send_delay_us, ge=0, le=1e6, description="from the cluster's send to the "
                                 "write on the socket, microseconds (the emulator's coordinator and agent per "
                                 "message: its start lateness)")
    pause_reaction_us: float = Field(TWIN.pause_reaction_us, gt=0, le=1e6, description="from a switch queue's "
                                     "XOFF/XON crossing to the hold/release at the upstream transmitter, beyond the "
                                     "cable's delay, microseconds (a MAC's: 2; the emulator's pause daemon: its "
                                     "measured pause/resume latency); the headroom per feeding link grows with it")
    tcp: Literal[tuple(TWIN_TCP)] = Field(TWIN.tcp, description="the hosts' congestion control (Linux's: cubic)")
    delack_count: int = Field(TWIN.delack_count, ge=1, le=64, description="segments a delayed ACK waits for "
                                                                          "(Linux: 2)")
    delack_timeout_ms: float = Field(TWIN.delack_timeout_ms, gt=0, le=1000, description="longest a delayed ACK "
                                     "waits, ms (Linux's TCP_DELACK_MIN after a quiet spell: 40)")
    initial_cwnd: int = Field(TWIN.initial_cwnd, ge=1, le=1000, description="initial congestion window, segments "
                                                                            "(Linux: 10)")
    min_rto_ms: float = Field(TWIN.min_rto_ms, gt=0, le=60000, description="minimum retransmission timeout, ms "
                                                                           "(Linux: 200)")

    def check_frame(self, mtu: int) -> None:
        """The token bucket holds a whole frame at ``mtu`` (the emulator's tbf refuses a smaller burst too; a
        frame larger than the bucket would never leave)."""
        frame = mtu + scale.ETHERNET_HEADER_BYTES
        if self.burst_bytes is not None and self.burst_bytes < frame:
            raise TestbedError(f"{self.burst_bytes} B is smaller than one frame ({frame} B at link.mtu {mtu}): "
                               f"expected at least {frame}, or null (no bucket)", key="burst_bytes")


class Fault(_Section):
    """One failure during every replay of the run, at the same run time on every fabric."""

    at: Seconds = Field(..., ge=0, description="run time it begins: cluster seconds after the run's start "
                        "(the planned replay: trace seconds after the slice's start)")
    duration: Optional[Seconds] = Field(None, gt=0, description="how long it lasts; null: until the run ends "
                                        "(whatever is still down then is put back)")
    target: Union[str, dict[FabricName, str]] = Field(
        ..., description="'link sw1:9' or 'link gpu3:p1' (a cable by either end), 'switch sw3' or 'controller'; "
                         "or one per fabric, e.g. {zcube: link sw1:9, roft: link leaf1:9}, since switch names "
                         "differ")
    action: Literal["down", "stop", "restart"] = Field("down", description="down: a cable or switch; stop or "
                                                       "restart: the controller")

    def target_on(self, kind: str) -> str | None:
        """The target on fabric ``kind`` (None: this fault names none there)."""
        return self.target if isinstance(self.target, str) else self.target.get(kind)


