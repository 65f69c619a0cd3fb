"""Traffic: the pure model (``traffic.model``: traces, LLM models, placement, the KV schedule, the
serving event machine, metrics) and the runtime that moves it over a fabric (``traffic.runtime``:
the agent in every emulated GPU, its launcher, the serving coordinator, cross and bulk traffic).

The model needs no root, no clock and no network; the runtime runs inside network namespaces.
Neither imports the testbed beyond its bottom modules (errors, paths, units, scale).
"""
