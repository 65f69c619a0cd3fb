"""One repetition of an experiment on one fabric: its settings, the drivers that make its traffic, the entry
point that runs it on a network backend (``orchestrate.run_repetition``), the write-up and the checks of its
numbers (docs/architecture.md)."""
