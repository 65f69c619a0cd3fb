"""The drivers of a repetition, side by side with one shape (``base.Driver``): ``plan`` (every KV transfer
timed from the trace) and ``live`` (the serving cluster with the network in the loop)."""
