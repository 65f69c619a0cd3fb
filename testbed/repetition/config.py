"""A repetition's settings: the experiment's sections as they are, and what differs per repetition.

The experiment file's sections (``testbed.repetition.settings``: trace, serving, link) are passed
through whole and read where they are used (``cfg.trace.speed``, ``cfg.serving.policy``); only the
seed, the fabric's faults and the backend are the repetition's own. They were checked when the
experiment was (``testbed.experiment.schema.validate``), so nothing here checks them again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from testbed.backends import DEFAULT as DEFAULT_BACKEND
from testbed.repetition.settings import Link, Serving, Trace

TRANSFER_TIMEOUT_S = 60.0  # a message not delivered by then has failed

# config.json's "replay" record: every setting under the flat name it always had (the report and older run
# directories read these names), in the order it always had -> (section, key) or a top-level attribute
RECORD: tuple[tuple[str, str, str | None], ...] = (
    ("trace", "trace", "path"), ("trace_format", "trace", "format"), ("skip_bad", "trace", "skip_bad"),
    ("start_s", "trace", "start_s"), ("duration_s", "trace", "duration_s"), ("first_n", "trace", "first_n"),
    ("speed", "trace", "speed"), ("model", "serving", "model"), ("dtype", "serving", "dtype"),
    ("prefill_tp", "serving", "prefill_tp"), ("decode_tp", "serving", "decode_tp"),
    ("prefill_fraction", "serving", "prefill_fraction"), ("scheduler", "serving", "scheduler"),
    ("seed", "seed", None), ("mode", "serving", "mode"), ("chunk_bytes", "chunk_bytes", None),
    ("policy", "serving", "policy"), ("transfer_timeout_s", "transfer_timeout_s", None),
    ("cross_flows", "cross_flows", None), ("represents_bps", "link", "represents"),
    ("connections", "serving", "connections"), ("driver", "serving", "driver"), ("arrivals", "serving", "arrivals"),
    ("concurrency", "serving", "concurrency"), ("prefill_ep", "serving", "prefill_ep"),
    ("layout", "serving", "layout"), ("decode_ep", "serving", "decode_ep"), ("decode_batch", "serving", "decode_batch"),
    ("decode_step_s", "serving", "decode_step_s"), ("prefill_chunk_tokens", "serving", "prefill_chunk_tokens"),
    ("popularity", "serving", "popularity"), ("zipf_s", "serving", "zipf_s"),
    ("time_dilation", "link", "time_dilation"), ("warmup_s", "serving", "warmup_s"),
    ("gpus_per_server", "gpus_per_server", None), ("faults", "faults", None),
)


@dataclass(frozen=True)
class RepetitionConfig:
    trace: Trace = field(default_factory=Trace)
    serving: Serving = field(default_factory=Serving)
    link: Link = field(default_factory=Link)
    seed: int = 0  # the experiment's seed + repetition - 1 (scheduler, expert routing, cross traffic)
    cross_flows: int = 0  # background bulk flows (random GPU pairs, seeded) for the whole repetition
    gpus_per_server: int = 8  # servers are whole groups of this many GPUs (NVLink inside)
    faults: tuple[dict, ...] = ()  # {at, duration, target, action} on this fabric (the schema checked them)
    backend: str = DEFAULT_BACKEND  # what carries the messages (testbed.backends)
    transfer_timeout_s: float = TRANSFER_TIMEOUT_S

    @property
    def chunk_bytes(self) -> int | None:
        """Slice size in emulated bytes; None: no slicing (the file's 0 or null)."""
        return self.serving.chunk_bytes or None

    @property
    def represents_bps(self) -> float:
        return self.link.represents

    @property
    def wall_per_run_s(self) -> float:
        """Wall seconds per second of the run's own clock: the live driver's time dilation, the planned
        replay's 1 / speed (it replays trace time sped up)."""
        return self.link.time_dilation if self.serving.driver == "live" else 1 / self.trace.speed

    def record(self) -> dict:
        """As config.json's "replay" records it (``RECORD``)."""
        out = {}
        for name, where, key in RECORD:
            value = getattr(getattr(self, where), key) if key else getattr(self, where)
            out[name] = list(value) if isinstance(value, tuple) else value
        return out
