"""PFC emulation: policy (thresholds, feeders), the pause daemon and its log analysis."""
