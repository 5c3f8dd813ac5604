"""``bakeoff show``'s one line for a failed trial (:func:`bakeoff.results.catalog.reason_line`), on a reason a
two-node torchrun trial really stored when one of its ranks was killed (#51: the line read ``======…``)."""

from bakeoff.results.catalog import reason_line

TORCHRUN = """rank 3 of 4 (torchrun's first observed failure) killed by SIGKILL (no evidence of out-of-memory: \
oom_kill in /sys/fs/cgroup/memory/x/memory.oom_control stayed at 0 during the trial) after 11 s; last output:       : \
2026-12-06_22:25:47
  host      : localhost
  rank      : 3 (local_rank: 0)
  exitcode  : -9 (pid: 8561)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 8561
=====================================================
srun: error: n2: task 0: Exited with exit code 1"""


def test_a_torchrun_failure_reads_as_its_rank_signal_not_a_rule_of_equals_signs():
    assert reason_line(TORCHRUN) == "traceback : Signal 9 (SIGKILL) received by PID 8561"
    assert reason_line(TORCHRUN.rsplit("\n", 1)[0]) == "traceback : Signal 9 (SIGKILL) received by PID 8561"


def test_a_traceback_reads_as_its_exception_and_a_long_line_is_cut():
    assert reason_line("Traceback (most recent call last):\n  File x\nValueError: bad\n") == "ValueError: bad"
    assert reason_line("x" * 150) == "x" * 100
    assert reason_line("=====\n") == ""
