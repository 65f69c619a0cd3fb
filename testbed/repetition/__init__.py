"""One repetition of an experiment on one fabric: its config, drivers, the checks of its numbers and its write-up."""
