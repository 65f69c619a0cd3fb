"""How long a repetition on the fluid engine takes, before it runs (``testbed run``'s "estimated wall time").

The engine's cost is its rate solves, one per arrival and departure instant, and they come with the
expert-parallel phases, whose number grows with the decode engines, i.e. with n; the set-up (the serving
cluster's hit tables and the port choices of every GPU pair) and the write-up grow with n too:

    wall s per repetition = SETUP_S + SETUP_PER_GPU_S x n + LOOP_PER_GPU_S x n x D

for D cluster seconds. Fitted on this 2-core machine (docs/fluid.md, "Speed"): the default experiment's load per
GPU (0.875 sessions), n = 32 and 512, 15 and 28 cluster s, both fabrics (ROFT's spines make its solves ~1.5x
ZCube's: the constant is their mean). Only the live driver with a closed loop has a load model; others get the
backend's flat ``setup_s``.
"""

from __future__ import annotations

SETUP_S = 2.0  # seconds per repetition whatever n
SETUP_PER_GPU_S = 0.045  # the cluster's set-up, the port choices, the write-up and the report's share, per GPU
LOOP_PER_GPU_S = 1.7e-3  # the fluid loop, per GPU and cluster second
LOAD_S = 2.0  # importing numba and loading the compiled solver (cached after the first run), once per process


def repetition_s(gpus: int, cluster_s: float) -> float:
    """Wall seconds of one repetition at n = ``gpus`` over ``cluster_s`` cluster seconds."""
    return SETUP_S + SETUP_PER_GPU_S * gpus + LOOP_PER_GPU_S * gpus * cluster_s


def for_experiment(exp) -> tuple[float, str] | None:
    """(wall seconds of one repetition, how it was derived) for an experiment, None when the model has no load
    for it (not a closed-loop live run)."""
    s = exp.serving
    if s.driver != "live" or s.arrivals != "closed":
        return None
    d = exp.trace.duration_s
    loop = LOOP_PER_GPU_S * exp.gpus * d
    return repetition_s(exp.gpus, d), (f"{d:g} cluster s at n={exp.gpus}: ~{loop:.0f} s of rate solves + "
                                       f"~{repetition_s(exp.gpus, 0):.0f} s set-up and write-up, from the fluid "
                                       "engine's measured cost per GPU on this machine (docs/fluid.md, Speed)")


__all__ = ["for_experiment", "repetition_s", "LOAD_S"]
