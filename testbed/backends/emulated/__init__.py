"""The emulated fabric as a network backend (``backend``) and what it runs around the traffic."""
