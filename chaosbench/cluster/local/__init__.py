"""The local backend (backend.py): the cluster as processes on this host."""
