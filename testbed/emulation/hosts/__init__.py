"""One fabric across several machines (issue 26).

* ``hostsfile``: the hosts file (YAML: name, SSH address, user, key), checked with one-line errors;
* ``placement``: which host each switch and GPU lives on, and the cables that cross hosts (pure);
* ``tunnels``: one kernel tunnel per cross-host cable, the MTU it needs, and the devices a host builds;
* ``pseudo``: pseudo-hosts on one machine for testing (a network, mount and PID namespace each, with its
  own sshd and Open vSwitch).

Nothing here is imported by a one-host fabric: without ``--hosts`` nothing changes.
"""
