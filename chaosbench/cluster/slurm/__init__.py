"""The Slurm backend: scenarios on a real Slurm allocation (backend.py), talking to Slurm only through
its commands (commands.py), plus a compose-hosted Slurm cluster to test against (testcluster.py)."""
