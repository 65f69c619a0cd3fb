"""The pause daemon's files, in the fabric's state directory: one spelling for everything that writes or
reads them (no imports: the daemon itself reads this)."""

POLICY_FILE = "pfc_policy.json"  # what the daemon executes (pfc.policy.daemon_policy makes it)
STATUS_FILE = "pfc_status.json"  # its live figures, rewritten once a second
LOG_FILE = "pfc.txt"  # the pause log: time_ns node node_type port event cause (pfc.analysis); a run's slice too
LATENCY_FILE = "pfc_latency.txt"  # pause and resume latencies, one line each
GAPS_FILE = "pfc_gaps.txt"  # the daemon's loop held up over 2 ms
