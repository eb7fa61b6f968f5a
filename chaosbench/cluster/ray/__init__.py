"""The Ray backend: scenarios as Ray Train runs on a containerised Ray cluster (backend.py), its
containers (compose.py), the job and its driver command (job.py) and Ray's own faults (faults.py)."""
