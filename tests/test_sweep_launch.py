"""launch/sweep.py's local runner: concurrent runs pinned to disjoint shares of the CPU cores."""

import os
import sys

from launch import sweep


def test_core_slots_split_the_cores_into_disjoint_contiguous_shares():
    assert sweep.core_slots(2, [0, 1]) == [{0}, {1}]
    assert sweep.core_slots(3, range(8)) == [{0, 1, 2}, {3, 4, 5}, {6, 7}]
    assert sweep.core_slots(1, [0, 1]) is None  # one run at a time: all cores
    assert sweep.core_slots(4, [0, 1]) is None  # more runs than cores: no pinning


def test_a_run_given_cores_runs_on_exactly_them(tmp_path):
    core = min(os.sched_getaffinity(0))
    cmd = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    assert sweep.run_one("probe", str(tmp_path / "probe"), cmd, cores={core}) == 0
    assert (tmp_path / "probe" / "console.txt").read_text().strip() == f"[{core}]"
    assert sweep.run_one("all", str(tmp_path / "all"), cmd) == 0
    assert (tmp_path / "all" / "console.txt").read_text().strip() == str(sorted(os.sched_getaffinity(0)))
