"""How long a run on the fluid engine takes, before it runs (``testbed run``'s "estimated wall time").

The engine's cost is its rate solves and the serving cluster's steps, both of which grow with the expert-parallel
phases, i.e. with n; a repetition's write-up and the report (once per command) grow with n too:

    wall s per repetition = SETUP_S + SETUP_PER_GPU_S x n + LOOP_PER_GPU_S x (n / 512) ^ LOOP_GROWTH x n x D
    wall s once           = REPORT_S + REPORT_PER_GPU_S x n      (the report; spread over the repetitions)

for D cluster seconds. Fitted on ROFT, the slower fabric (repetitions run side by side, one of each fabric, so a
wave lasts as long as ROFT's), measured on this 2-core machine with nothing else running (docs/fluid.md, "Speed";
the default's load per GPU, 0.875 sessions): n = 512, 28 cluster s, loop 32.2 wall s (ZCube 22.4); n = 16,384,
4 cluster s, loop 304-353 wall s (ZCube 176-187), write-up ~130 s (ZCube ~36: ROFT's 131,072 links); ROFT's
loop per GPU grows as n^0.23 from 512 to 16,384 (its ECMP joins its flows in larger components). The whole n=512
command: 49 s (estimated ~45 s); the n=16,384 scale point, 6 repetitions and the report: 23.5 min (~24).
Only the live driver with a closed loop has a load model; others get the backend's flat ``setup_s``.
"""

from __future__ import annotations

SETUP_S = 1.5  # seconds per repetition whatever n: the paths, the serving cluster, the write-up's fixed part
SETUP_PER_GPU_S = 8.0e-3  # the write-up (rows, link counters, summaries) per GPU: ROFT at 16,384 ~130 s
LOOP_PER_GPU_S = 2.25e-3  # the fluid loop, per GPU and cluster second at n = 512 (ROFT; ZCube 1.56e-3)
LOOP_GROWTH = 0.23  # ... times (n / 512) to this power: ROFT at 16,384 4.6-5.4e-3 (ZCube 2.7-2.9e-3)
REPORT_S = 5.0  # the report, once per command
REPORT_PER_GPU_S = 8.5e-3  # ... and its growth with n (loading the link and message files, the heatmaps)
LOAD_S = 2.0  # importing numba and loading the compiled solver (cached after the first run), once per process
PEAK_BYTES = 0.3e9  # a repetition's peak memory whatever n (the interpreter, numba, the serving cluster's tables)
PEAK_PER_GPU_BYTES = 0.42e6  # ... and per GPU: n = 16,384 peaked at 6.9 GB for the whole command, report included


def peak_bytes(gpus: int) -> float:
    """A repetition's peak memory at n = ``gpus`` (an upper bound: the whole command's measured peak per GPU)."""
    return PEAK_BYTES + PEAK_PER_GPU_BYTES * gpus


def repetition_s(gpus: int, cluster_s: float) -> float:
    """Wall seconds of one repetition at n = ``gpus`` over ``cluster_s`` cluster seconds (without the report)."""
    return SETUP_S + SETUP_PER_GPU_S * gpus + loop_per_gpu_s(gpus) * gpus * cluster_s


def loop_per_gpu_s(gpus: int) -> float:
    """The loop's wall seconds per GPU and cluster second at n = ``gpus``."""
    return LOOP_PER_GPU_S * (gpus / 512) ** LOOP_GROWTH


def report_s(gpus: int) -> float:
    """Wall seconds of the report of a run at n = ``gpus``."""
    return REPORT_S + REPORT_PER_GPU_S * gpus


def for_experiment(exp) -> tuple[float, str] | None:
    """(wall seconds of one repetition with its share of the report, how it was derived) for an experiment, None
    when the model has no load for it (not a closed-loop live run)."""
    s = exp.serving
    if s.driver != "live" or s.arrivals != "closed":
        return None
    d, n = exp.trace.duration_s, exp.gpus
    loop = loop_per_gpu_s(n) * n * d
    share = report_s(n) / (len(exp.fabrics) * exp.repetitions)
    return repetition_s(n, d) + share, (f"{d:g} cluster s at n={n}: ~{loop:.0f} s of the loop + "
                                        f"~{repetition_s(n, 0):.0f} s set-up and write-up + ~{share:.0f} s share of "
                                        "the report, from the fluid engine's measured cost per GPU on this machine "
                                        "(docs/fluid.md, Speed)")


__all__ = ["for_experiment", "repetition_s", "report_s", "peak_bytes", "LOAD_S"]
