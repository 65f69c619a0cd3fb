"""The pure traffic model: traces, LLM models, placement, the KV schedule, the serving event machine,
metrics. No clock, no network, no root."""
