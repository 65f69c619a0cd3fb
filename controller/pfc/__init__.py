"""PFC emulation: policy (thresholds, feeders), the pause helper and its log analysis."""
