"""The ns-3 twin: the same experiment on a packet-level simulated fabric (issue 25).

* ``engine``: loads ns-3 (the PyPI ``ns3`` wheel, cppyy) and compiles ``twin.cc`` once per process;
* ``plan``: the fabric model and link settings as ns-3 nodes, devices, queues and per-connection routes;
* ``pfc``: the PFC policy's thresholds per queue, and the pause log;
* ``apps``: persistent TCP connections per NIC port pair carrying the serving cluster's (or the plan's)
  messages;
* ``summarise``: the queue counters, the merged rows and twin.json (the twin's own speed);
* ``backend``: ``Ns3Backend``, the seam's implementation.
"""
