"""How long a repetition on the twin takes, before it runs (``testbed run``'s "estimated wall time").

The twin's cost is its events: ns-3 processes a roughly steady number of events per wall second, and a run
has a number of events per cluster second set by the packets it carries, i.e. by the emulated bytes and
messages the serving cluster sends. Model (docs/twin.md, "Speed"):

    wall s per repetition = fixed(n, D) + loop(D), loop(D) = c x (D - RAMP_S / 2) (D >= RAMP_S)
                                                      or c x D^2 / (2 RAMP_S)  (shorter runs)
    c = events per cluster s / events per wall s(n), the steady cost of a cluster second

* events per cluster s = EVENTS_PER_CLUSTER_S x (in flight / 128)^IN_FLIGHT_EXP x bytes^BYTES_EXP, where
  ``bytes`` is the emulated bytes per real byte relative to the default's (time dilation x link rate /
  represented rate, over 12 x 3 Mbit/s / 200 Gbit/s): 100 Gbit/s links carry twice the emulated bytes;
* events per wall s(n) = EVENTS_PER_WALL_S x (n / 32)^-N_EXP (the larger fabric's working set, and every
  host's TCP demultiplexer scans all its connections), with a core to itself;
* both are averages over FIT_S = 32 cluster s. A closed loop starts with every request arriving at once:
  its first cluster seconds (prefill, before the decode engines' exchanges and the queues reach their
  steady state) cost less, so the loop's cost per cluster second ramps up over RAMP_S cluster seconds;
* fixed(n, D): building the network, the serving cluster's set-up and the write-up (which grows with the
  messages, so with n and D);
* ns-3's own loading (once per process) is added once.

Fitted on this 2-core machine's runs of the default experiment, CPU seconds of the loop (docs/twin.md,
"Speed"): n=32 with 128 in flight over 32 cluster s (481k / 583k events per cluster s on ZCube / ROFT,
412-431k events per CPU s), n=512 with 2048 in flight on ROFT (8.0M events per cluster s over 32 cluster s,
266k events per CPU s; 22, 120 and 962 CPU s of loop for 4, 8 and 32 cluster s). BYTES_EXP comes from a
user's n=512 runs at 100 and 200 Gbit/s (33 / 21 wall s per cluster s), not re-measured here. Only the live
driver with a closed loop has a load model (the requests in flight); others get the flat ``FALLBACK_S``.

The fit above is the Azure chat trace's (~1.2K-token prompts). A named workload with other request sizes
carries another number of events per request in flight (``WORKLOAD_EVENTS``): ``agentic-coding`` (64K-token
contexts whose whole KV crosses the fabric) measured 364k events per cluster s at n=32 with 32 in flight
(25 cluster s, dilation 4) and 5.0M at n=512 with 448 (15 cluster s, dilation 4), 5.4 and 5.6 x the chat fit's
figures. A
run prints its real pace every ``apps.PROGRESS_EVERY_S`` wall seconds: the better guide once it started.
"""

from __future__ import annotations

LOAD_S = 13.0  # loading ns-3 and compiling twin.cc, once per process
EVENTS_PER_CLUSTER_S = 530e3  # n=32, 128 in flight, links standing for 200 Gbit/s, dilation 12, 3 Mbit/s
IN_FLIGHT_EXP = 0.98
BYTES_EXP = 0.65
EVENTS_PER_WALL_S = 420e3  # at n=32, one core to itself
N_EXP = 0.165
FIXED_S = (10.0, 0.1, 0.0065)  # s + s per GPU + s per GPU and cluster s: build, cluster set-up, write-up
FALLBACK_S = 20.0
WORKLOAD_EVENTS = {"agentic-coding": 5.5}  # events per request in flight, over the chat trace's (docstring)
RAMP_S = 9.4  # cluster s over which a closed loop's cost per cluster second ramps up to its steady value
FIT_S = 32.0  # the run length EVENTS_PER_CLUSTER_S was averaged over
DEFAULT_BYTES = 12 * 3e6 / 200e9  # the default experiment's dilation x rate / represented rate


def events_per_cluster_s(in_flight: int, bytes_factor: float, workload: str | None = None) -> float:
    """Expected events per cluster second at ``in_flight`` requests of ``workload`` (None: the chat trace the
    model was fitted on) and ``bytes_factor`` x the default's emulated bytes per real byte."""
    return (EVENTS_PER_CLUSTER_S * WORKLOAD_EVENTS.get(workload, 1.0) * (in_flight / 128) ** IN_FLIGHT_EXP
            * bytes_factor ** BYTES_EXP)


def events_per_wall_s(gpus: int) -> float:
    return EVENTS_PER_WALL_S * (gpus / 32) ** -N_EXP


def fixed_s(gpus: int, cluster_s: float = 0.0) -> float:
    """Building the network, the cluster's set-up and the write-up (which grows with the messages)."""
    return FIXED_S[0] + FIXED_S[1] * gpus + FIXED_S[2] * gpus * cluster_s


def wall_per_cluster_s(gpus: int, in_flight: int, bytes_factor: float = 1.0, workload: str | None = None) -> float:
    """Wall s per cluster s averaged over a FIT_S-long run (what the constants were measured as)."""
    return events_per_cluster_s(in_flight, bytes_factor, workload) / events_per_wall_s(gpus)


def loop_s(cluster_s: float, average_per_cluster_s: float) -> float:
    """Wall seconds of the simulation loop over ``cluster_s``, for a cost averaging ``average_per_cluster_s``
    over FIT_S cluster seconds, with the closed loop's ramp (module docstring)."""
    steady = average_per_cluster_s * FIT_S / (FIT_S - RAMP_S / 2)
    if cluster_s >= RAMP_S:
        return steady * (cluster_s - RAMP_S / 2)
    return steady * cluster_s ** 2 / (2 * RAMP_S)


def repetition_s(gpus: int, in_flight: int, cluster_s: float, bytes_factor: float = 1.0,
                 workload: str | None = None) -> float:
    """Wall seconds of one repetition (ns-3's loading not included)."""
    return fixed_s(gpus, cluster_s) + loop_s(cluster_s, wall_per_cluster_s(gpus, in_flight, bytes_factor, workload))


def for_experiment(exp) -> tuple[float, str] | None:
    """(wall seconds of one repetition, how it was derived) for an experiment (``testbed.experiment``'s),
    None when the model has no load for it (not a closed-loop live run)."""
    s = exp.serving
    if s.driver != "live" or s.arrivals != "closed":
        return None
    bytes_factor = exp.link.time_dilation * exp.link.rate / exp.link.represents / DEFAULT_BYTES
    workload = exp.trace.workload if exp.trace.path is None else None
    per = wall_per_cluster_s(exp.gpus, s.concurrency, bytes_factor, workload)
    total = repetition_s(exp.gpus, s.concurrency, exp.trace.duration_s, bytes_factor, workload)
    loop, fixed = loop_s(exp.trace.duration_s, per), fixed_s(exp.gpus, exp.trace.duration_s)
    how = (f"{exp.trace.duration_s:g} cluster s at ~{per:.2g} wall s per cluster s over {FIT_S:g} s, less in a "
           f"closed loop's first {RAMP_S:g} s (n={exp.gpus}, {s.concurrency} in flight of {workload or 'the trace'}, "
           f"{bytes_factor:.3g} x the "
           f"default's emulated bytes): ~{loop:.0f} s + ~{fixed:.0f} s set-up and write-up, from the twin's "
           "measured events per cluster s and per CPU s on this machine (docs/twin.md, Speed; more when other "
           "jobs share the cores)")
    return total, how


__all__ = ["for_experiment", "repetition_s", "loop_s", "wall_per_cluster_s", "events_per_cluster_s",
           "events_per_wall_s", "fixed_s", "LOAD_S", "FALLBACK_S", "RAMP_S"]
