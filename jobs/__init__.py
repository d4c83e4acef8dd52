"""What an operator runs: the `seedance` CLI, job configs and schedules."""
