"""The flow-level backend (``--backend fluid``): every message a flow, max-min fair rates (docs/fluid.md)."""
