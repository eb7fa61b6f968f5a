"""The cluster's error types: a leaf every cluster module imports, importing nothing of the cluster."""
from __future__ import annotations


class ClusterError(RuntimeError):
    """The cluster or harness itself broke (maps to CLI exit code 3)."""


class UnsupportedFault(ClusterError):
    """This backend cannot inject the requested fault."""
