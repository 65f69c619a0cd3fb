"""One repetition's settings, typed and frozen: what a repetition on one fabric runs with.

The experiment file is checked and converted once (``testbed.experiment.schema.repetition_spec``); every
layer below takes this object as it is and converts nothing again: the fabric (``FabricSpec``: its kind and
size, the datapath's link settings, PFC, the real link one link stands for), the trace and the serving
deployment (the schema's own sections, ``testbed.repetition.settings``), the time dilation, the seed, what
surrounds the traffic, and where it runs (the backend and a hosts file, by name: the experiment resolves the
backend object once and passes it down beside the spec).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from testbed.backends.base import FabricSpec
from testbed.repetition.settings import Serving, Trace, Twin
from traffic.runtime.agent import DEFAULT_TRANSFER_TIMEOUT_S

# config.json's "replay" record: every setting under the flat name it always had (the report and older run
# directories read these names), in the order it always had -> a function of the spec
RECORD: tuple[tuple[str, object], ...] = (
    ("trace", lambda s: s.trace.path), ("trace_format", lambda s: s.trace.format),
    ("skip_bad", lambda s: s.trace.skip_bad), ("start_s", lambda s: s.trace.start_s),
    ("duration_s", lambda s: s.trace.duration_s), ("first_n", lambda s: s.trace.first_n),
    ("speed", lambda s: s.trace.speed), ("model", lambda s: s.serving.model), ("dtype", lambda s: s.serving.dtype),
    ("prefill_tp", lambda s: s.serving.prefill_tp), ("decode_tp", lambda s: s.serving.decode_tp),
    ("prefill_fraction", lambda s: s.serving.prefill_fraction), ("scheduler", lambda s: s.serving.scheduler),
    ("seed", lambda s: s.seed), ("mode", lambda s: s.serving.mode), ("chunk_bytes", lambda s: s.chunk_bytes),
    ("policy", lambda s: s.serving.policy), ("transfer_timeout_s", lambda s: s.transfer_timeout_s),
    ("cross_flows", lambda s: s.cross_flows), ("represents_bps", lambda s: s.represents_bps),
    ("connections", lambda s: s.serving.connections), ("driver", lambda s: s.serving.driver),
    ("arrivals", lambda s: s.serving.arrivals), ("concurrency", lambda s: s.serving.concurrency),
    ("prefill_ep", lambda s: s.serving.prefill_ep), ("layout", lambda s: s.serving.layout),
    ("decode_ep", lambda s: s.serving.decode_ep), ("decode_batch", lambda s: s.serving.decode_batch),
    ("decode_step_s", lambda s: s.serving.decode_step_s),
    ("prefill_chunk_tokens", lambda s: s.serving.prefill_chunk_tokens),
    ("popularity", lambda s: s.serving.popularity), ("zipf_s", lambda s: s.serving.zipf_s),
    ("time_dilation", lambda s: s.time_dilation), ("warmup_s", lambda s: s.serving.warmup_s),
    ("gpus_per_server", lambda s: s.gpus_per_server), ("faults", lambda s: list(s.faults)),
    ("hash_seed", lambda s: s.hash_seed), ("paths_from", lambda s: s.paths_from),
)


@dataclass(frozen=True)
class RepetitionSpec:
    """Everything one repetition runs with (see the module docstring)."""

    fabric: FabricSpec
    trace: Trace
    serving: Serving
    time_dilation: float = 1.0  # live driver: wall seconds of the emulated world per cluster second
    seed: int = 0  # the experiment's seed + repetition - 1 (scheduler, expert routing, cross traffic)
    rep: int = 1  # 1-based
    cross_flows: int = 0  # background bulk flows (random GPU pairs, seeded) for the whole repetition
    gpus_per_server: int = 8  # servers are whole groups of this many GPUs (NVLink inside)
    faults: tuple[dict, ...] = ()  # {at, duration, target, action} on this fabric (the schema checked them)
    backend: str = "emulated"  # what carries the messages (testbed.backends)
    hosts: str | None = None  # a hosts file: the emulated fabric spread over those machines
    hash_seed: int | None = None  # the ECMP outcome's seed (the connections' source ports); None: ``seed``
    transfer_timeout_s: float = DEFAULT_TRANSFER_TIMEOUT_S  # a message not delivered by then has failed
    paths_from: str | None = None  # an emulator run whose recorded paths a self-routing backend follows
    twin: Twin = Twin()  # the ns-3 twin's model assumptions (backend ns3)

    @property
    def recorded_paths(self) -> str | None:
        """This repetition's recording in ``paths_from`` (runs/<fabric>/rep<r>/ecmp.json), or None."""
        if self.paths_from is None:
            return None
        from testbed.backends.paths import RECORDING

        return str(Path(self.paths_from) / "runs" / self.kind / f"rep{self.rep}" / RECORDING)

    @property
    def kind(self) -> str:
        return self.fabric.kind

    @property
    def chunk_bytes(self) -> int | None:
        """Slice size in emulated bytes; None: no slicing (the file's 0 or null)."""
        return self.serving.chunk_bytes or None

    @property
    def represents_bps(self) -> float:
        return self.fabric.represents_bps

    @property
    def live(self) -> bool:
        return self.serving.driver == "live"

    @property
    def run_s(self) -> float:
        """Seconds of the run's own clock it covers: cluster seconds (live: the closed loop's duration, or the
        trace window sped up by the trace's speed), or the planned replay's trace seconds."""
        if self.live and self.serving.arrivals != "closed":
            return self.trace.duration_s / self.trace.speed
        return self.trace.duration_s

    @property
    def wall_per_run_s(self) -> float:
        """Wall seconds per second of the run's own clock: the live driver's time dilation (per cluster second),
        the planned replay's 1 / speed (per trace second: it replays the slice sped up). The one formula:
        summary.json records it (``wall_per_run_s``) and everything after the run reads it from there."""
        return self.time_dilation if self.live else 1 / self.trace.speed

    @property
    def wall_s(self) -> float:
        """Wall seconds the traffic itself takes (set-up not counted)."""
        return self.run_s * self.wall_per_run_s

    def record(self) -> dict:
        """As config.json's "replay" records it (``RECORD``)."""
        return {name: get(self) for name, get in RECORD}


def served_requests(spec: RepetitionSpec) -> tuple[list, int]:
    """(the requests the repetition serves, trace rows skipped as bad): ``traffic.model.traces.served_requests``
    on the spec's trace, the one rule for the drivers and the run's own count."""
    from traffic.model import traces, workloads

    tr = spec.trace
    closed = spec.live and spec.serving.arrivals == "closed"
    if tr.generated:  # drawn, not read: first_n is how many
        drawn = workloads.workload_requests(tr.workload, seed=tr.workload_seed, n_requests=tr.first_n,
                                            shape=tr.workload_shape)
        return traces.served_requests(drawn, 0.0, tr.duration_s, None, 1.0, closed, label=tr.workload), 0
    try:
        version = os.stat(tr.path).st_mtime_ns, os.stat(tr.path).st_size
    except OSError:
        version = None, None  # read_trace says what is wrong with it, in one line
    requests, skipped = _read(tr.path, tr.format, tr.skip_bad, *version)
    return traces.served_requests(requests, tr.start_s, tr.duration_s, tr.first_n, tr.speed, closed,
                                  label=tr.path), skipped


@functools.lru_cache(maxsize=4)
def _read(path: str, fmt: str, skip_bad: bool, mtime_ns: int | None, size: int | None) -> tuple[tuple, int]:
    """A trace read once per process for each version of the file (its time and size in the key): a run reads
    it for its check, its count and every repetition's preparation."""
    from traffic.model import traces

    read = traces.read_trace(path, fmt, skip_bad=skip_bad)
    return tuple(read.requests), read.skipped


def served_source(spec: RepetitionSpec) -> dict:
    """Where the repetition's requests come from, as experiment.json's ``served`` records it and the terminal's
    first line says it (``testbed.experiment.run.source_line``): a generated workload (its name and seed), a
    named workload's shipped trace or the user's trace file (its path and format); how many requests, how many
    with ``hash_ids`` (the prefix cache's keys) and how many bad rows were skipped."""
    from traffic.model import traces

    reqs, skipped = served_requests(spec)
    tr = spec.trace
    return {"source": "generated" if tr.generated else "workload" if tr.workload else "trace",
            "workload": tr.workload, "seed": tr.workload_seed if tr.generated else None, "path": tr.path,
            "format": None if tr.generated else tr.format if tr.format != "auto" else traces.detect_format(tr.path),
            "requests": len(reqs), "with_hash_ids": sum(1 for r in reqs if r.hash_ids), "skipped_rows": skipped}
