"""A repetition's settings: what one repetition on one fabric replays, and how (either driver)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from testbed import backends, scale
from testbed.errors import TestbedError
from testbed.fabric.routing import DEFAULT_POLICY, POLICIES
from testbed.paths import DEFAULT_TRACE
from traffic.runtime.agent import CONNECTION_MODES

DRIVERS = ("plan", "live")


@dataclass
class RepetitionConfig:
    trace: str = str(DEFAULT_TRACE)
    trace_format: str = "auto"
    skip_bad: bool = False
    start_s: float = 0.0  # trace window start (trace seconds)
    duration_s: float = 120.0  # trace seconds replayed (after speed-up: wall seconds = duration / speed)
    first_n: int | None = None
    speed: float = 1.5
    model: str = "llama-3.1-70b"
    dtype: str = "bf16"
    prefill_tp: int = 8
    decode_tp: int = 2
    prefill_fraction: float = 0.5
    scheduler: str = "round_robin"
    seed: int = 0
    mode: str = "whole"
    chunk_bytes: int | None = 65536
    policy: str = DEFAULT_POLICY
    transfer_timeout_s: float = 60.0
    cross_flows: int = 0  # background iperf3 flows (random GPU pairs, seeded) for the whole replay
    represents_bps: float = scale.REAL_LINK_BPS  # the real link an emulated one stands for
    connections: str = CONNECTION_MODES[0]  # the agents' --connections: persistent
    # the live driver (testbed/repetition/live.py): serving with the network in the loop
    driver: str = "plan"  # plan: every KV transfer timed before the run; live: a coordinator runs the cluster
    arrivals: str = "trace"  # live: trace-timed arrivals, or closed loop with `concurrency` requests in flight
    concurrency: int = 64
    prefill_ep: int | None = None  # live, MoE: GPUs per prefill EP group (None: all prefill GPUs)
    layout: str | None = None  # live, MoE: a named serving layout (traffic.model.placement.SERVING_LAYOUTS)
    decode_ep: int | None = None
    decode_batch: int = 256
    decode_step_s: float = 0.030
    prefill_chunk_tokens: int = 512
    popularity: str = "uniform"
    zipf_s: float = 1.0
    time_dilation: float = 1.0
    warmup_s: float = 0.0
    gpus_per_server: int = 8  # live: servers are whole groups of this many GPUs (NVLink inside)
    faults: tuple = ()  # {at, duration, target, action} dicts (fault_schedule), checked by the schema
    backend: str = "emulated"  # what carries the messages (testbed.backends)

    def validate(self) -> "RepetitionConfig":
        if self.policy not in POLICIES:
            raise TestbedError(f"policy {self.policy!r} is unknown: expected one of {', '.join(POLICIES)}")
        if not self.duration_s > 0:
            raise TestbedError(f"duration {self.duration_s:g} s is not positive: expected e.g. 120s")
        if self.connections not in CONNECTION_MODES:
            raise TestbedError(f"connections {self.connections!r} is unknown: expected one of "
                               f"{', '.join(CONNECTION_MODES)}")
        if self.backend not in backends.NAMES:
            raise TestbedError(f"backend {self.backend!r} is unknown: expected one of {', '.join(backends.NAMES)}")
        if self.driver not in DRIVERS:
            raise TestbedError(f"driver {self.driver!r} is unknown: expected one of {', '.join(DRIVERS)}")
        if not self.time_dilation >= 1:
            raise TestbedError(f"time dilation {self.time_dilation:g} is below 1: expected 1 (none) or more")
        if self.driver == "plan" and (self.arrivals != "trace" or self.time_dilation != 1):
            raise TestbedError("closed-loop arrivals and time dilation need serving.driver live; the planned replay "
                               "times every transfer from the trace")
        if not self.represents_bps > 0:
            raise TestbedError(f"represents {self.represents_bps:g} bit/s is not positive: expected e.g. 400gbit")
        if not self.speed > 0:
            raise TestbedError(f"speed {self.speed:g} is not positive: expected e.g. 1 or 10")
        if Path(self.trace).is_dir():
            raise TestbedError(f"trace {self.trace} is a directory: expected a Mooncake JSONL or Azure CSV file "
                               "(plain or .gz)")
        if not Path(self.trace).is_file():
            raise TestbedError(f"trace {self.trace} does not exist: expected a Mooncake JSONL or Azure CSV file "
                               "(plain or .gz)")
        return self

    def record(self) -> dict:
        """As config.json's "replay" records it (every setting by its flat name; the report reads it)."""
        doc = asdict(self)
        doc.pop("backend")  # config.json names the backend on its own
        return doc
