"""Evidence the harness gathers itself, from outside the job: what checkpoint files the nodes and the
bucket hold (inventory), and, after a run, what the cluster left behind. Does I/O; the checks in
chaosbench/checks/ are pure functions over what this package wrote to the run directory."""
