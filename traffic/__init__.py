"""Prefill-to-decode KV-cache traffic: traces, models, placement, schedules, metrics.

Pure logic (no root, no network). Modules: ``traces`` (trace readers and
slicing), ``models`` (KV bytes per token), ``placement`` (instances on GPUs and
request scheduling), ``rankmap`` (GPU-level KV transfers per request),
``schedule`` (timed transfer list, TTFT proxy) and ``metrics`` (percentiles,
FCT slowdown, size bins, fct.txt).
"""
