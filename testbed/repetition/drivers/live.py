"""The live driver: serving with the network in the loop (``serving.driver: live``).

Where the planned replay computes every transfer's time before the run, here the serving cluster
(``traffic.model.serving``) runs while a network backend carries its KV transfers and
expert-parallel messages: steps wait for their slowest message, so TTFT and output tokens/s move
when the fabric is slow. This module turns the repetition's settings into the cluster's config
(``prepare_live``, the coordinator's JSON) and hands it to the backend's ``serve``; its summary is
``testbed.repetition.drivers.live_summary``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from common import scale
from fabrics import Fabric, addressing
from testbed.backends.base import Backend, Carried, LinkSettings, Log, Network, ServingTraffic
from testbed.repetition.drivers.base import Driver, conditions
from testbed.repetition.spec import RepetitionSpec, served_requests


@dataclass
class LiveSetup:
    """What ``prepare_live`` computed: the serving cluster's config and a few figures for the summary."""

    traffic: ServingTraffic
    requests: int
    bytes_scale: float
    engines: dict  # "prefill" / "decode" -> each engine's GPUs
    layout: dict | None = None  # {"name", "prefill": {"engines", "gpus", "form"}, "decode": ...}
    warnings: list[str] = field(default_factory=list)

    @property
    def config(self) -> dict:
        return self.traffic.config


# the serving section's keys the cluster model takes under the same name (traffic.model.serving.ServingSpec)
CLUSTER_KEYS = ("prefix_cache", "prefix_hit", "prefill_routing", "decode_prefix_cache", "decode_memory", "gpu",
                "weights_dtype", "prefill_mem_fraction", "decode_mem_fraction", "think_s", "mla_sender",
                "hicache_ratio", "warm_start")


def cluster_spec(spec: RepetitionSpec, n_gpus: int, rate_bps: float) -> tuple[dict, object, tuple, tuple]:
    """The serving cluster a repetition runs, from its settings: (the coordinator's ``spec`` object, the
    ``ServingSpec`` it describes, checked; the prefill and the decode engines). Pure computation."""
    from traffic.model import models, placement, serving

    s = spec.serving
    model = models.get_model(s.model)
    moe = model.expert is not None
    p_tp, d_tp = (1, 1) if moe else (s.prefill_tp, s.decode_tp)
    if s.layout is not None:  # a named deployment (docs/serving.md, "Layouts")
        built = placement.layout_engines(s.layout, n_gpus, spec.gpus_per_server, s.prefill_fraction)
        prefill, decode = built["prefill"], built["decode"]
    else:
        place = placement.place(n_gpus, p_tp, d_tp, s.prefill_fraction, gpus_per_server=spec.gpus_per_server)
        n_pre = sum(len(i.gpus) for i in place.prefill)
        n_dec = sum(len(i.gpus) for i in place.decode)
        prefill = serving.build_engines("prefill", place.prefill, (s.prefill_ep or n_pre) if moe else None)
        decode = serving.build_engines("decode", place.decode, (s.decode_ep or n_dec) if moe else None)
    b_scale = scale.bytes_scale(rate_bps, spec.represents_bps) / spec.time_dilation
    cluster = dict(model=model.name, dtype=s.dtype, gpus_per_server=spec.gpus_per_server, bytes_scale=b_scale,
                   chunk_bytes=spec.chunk_bytes, prefill_chunk_tokens=s.prefill_chunk_tokens,
                   decode_batch=s.decode_batch, decode_step_s=s.decode_step_s, popularity=s.popularity,
                   zipf_s=s.zipf_s, seed=spec.seed, arrivals=s.arrivals, concurrency=s.concurrency,
                   duration_s=spec.run_s, warmup_s=s.warmup_s,
                   **{k: getattr(s, k) for k in CLUSTER_KEYS},
                   prefill=[[list(u.gpus) for u in e] for e in prefill],
                   decode=[[list(u.gpus) for u in e] for e in decode])
    checked = serving.ServingSpec(model=model, prefill=prefill, decode=decode,
                                  **{k: v for k, v in cluster.items() if k not in ("model", "prefill", "decode")})
    return cluster, checked, prefill, decode


def check_live(spec: RepetitionSpec, n_gpus: int, rate_bps: float) -> None:
    """Everything a live repetition of ``spec`` would fail on that its settings decide, without running it: the
    cluster's own rules (``cluster_spec``) and whether it can serve the requests (``serving_spec.check_serves``:
    the EP groups' experts, the caches' and pools' sizes, each request's KV against a decode pool)."""
    from traffic.model.serving_spec import check_serves

    check_serves(cluster_spec(spec, n_gpus, rate_bps)[1], served_requests(spec)[0])


def prepare_live(spec: RepetitionSpec, n_gpus: int, rate_bps: float) -> LiveSetup:
    """The coordinator's config from a RepetitionSpec: pure computation, no fabric needed."""
    from traffic.model import serving

    s = spec.serving
    reqs, _ = served_requests(spec)
    cluster, checked, prefill, decode = cluster_spec(spec, n_gpus, rate_bps)
    gpus = range(1, n_gpus + 1)
    # a generated workload travels as its recipe (the coordinator draws the same requests), a trace's as rows
    rows = ({"workload": spec.trace.workload, "seed": spec.trace.workload_seed, "n": len(reqs),
             "shape": spec.trace.workload_shape}
            if spec.trace.generated else [r.to_row() for r in reqs])
    config = {"spec": cluster, "requests": rows,
              "dilation": spec.time_dilation, "agents": [f"gpu{g}" for g in gpus],
              "ips": {str(g): [addressing.ip_of(g, 1), addressing.ip_of(g, 2)] for g in gpus},
              "policy": s.policy}
    engines = {"prefill": [[g for u in e for g in u.gpus] for e in prefill],
               "decode": [[g for u in e for g in u.gpus] for e in decode]}
    return LiveSetup(ServingTraffic(config), len(reqs), checked.bytes_scale, engines,
                     serving.layout_summary(s.layout, prefill, decode))


class LiveDriver(Driver):
    """The serving cluster with the network in the loop."""

    name = "live"

    def prepare(self, spec: RepetitionSpec, net: Network) -> LiveSetup:
        return prepare_live(spec, net.model.n_gpus, net.link.rate_bps)

    def run(self, prepared: LiveSetup, backend: Backend, spec: RepetitionSpec, run_dir: Path, log: Log) -> Carried:
        traffic = prepared.traffic
        return backend.serve(spec.fabric, traffic, conditions(spec, spec.wall_s), run_dir, log)

    def summarize(self, prepared: LiveSetup, carried: Carried, rows: list[dict], run_dir: Path, fabric: Fabric,
                  link: LinkSettings) -> dict:
        from testbed.repetition.drivers.live_summary import serving_summary

        return serving_summary(carried.serving, prepared.traffic, prepared.engines, rows, run_dir, link, fabric,
                               prepared.layout)
