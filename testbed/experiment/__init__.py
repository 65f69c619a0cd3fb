"""Experiments: the experiment file and its schema (``schema``), and what runs it: ``run``, ``sweep``,
``calibrate``, the load curve."""
