"""testbed.emulation.cpus on a made-up /proc: the PMD threads' CPUs, and the ones left for the host process."""

from __future__ import annotations

import os

from testbed.emulation import cpus


def _task(root, pid, tid, comm, allowed):
    d = root / str(pid) / "task" / str(tid)
    d.mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    (d / "status").write_text(f"Name:\t{comm}\nCpus_allowed_list:\t{allowed}\n")


def test_pmd_cpus_are_read_from_the_pmd_threads_of_ovs_vswitchd(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "comm").write_text("ovs-vswitchd\n")
    _task(tmp_path, 7, 7, "ovs-vswitchd", "0-3")
    _task(tmp_path, 7, 9, "pmd-c01/id:288", "1")
    _task(tmp_path, 7, 10, "pmd-c03/id:289", "3")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "comm").write_text("python\n")
    (tmp_path / "self").mkdir()
    assert cpus.pmd_cpus(str(tmp_path)) == {1, 3}
    assert cpus._cpu_list("0-1,4") == {0, 1, 4}
    mine = os.sched_getaffinity(0)
    assert set(cpus.lateness_cpus(str(tmp_path))) == (mine - {1, 3} or mine)
