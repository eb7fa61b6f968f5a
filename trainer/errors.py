"""Errors the trainer raises; each message says what is wrong and how to fix it."""
from __future__ import annotations


class TrainerError(RuntimeError):
    """Base class: any error that makes a worker exit (after a `fatal` event)."""


class ConfigurationError(TrainerError):
    """A config value is missing or invalid. Names the section, the field and the valid options."""

    def __init__(self, message: str, section: str | None = None, field: str | None = None,
                 valid_options: list | None = None):
        super().__init__(message)
        self.section, self.field, self.valid_options = section, field, valid_options


class DataLoadingError(TrainerError):
    """Training data or its token index cannot be read."""


class TopologyChangeError(TrainerError):
    """The world size is outside what the config allows (e.g. below elastic.min_nodes)."""


class LaunchError(TrainerError):
    """The process was not started the way the trainer needs (e.g. not under torchrun)."""


class HealthCheckError(TrainerError):
    """The periodic collective health check failed or timed out: a peer is gone or silent."""


class ReplicaDivergenceError(TrainerError):
    """Data-parallel replicas no longer hold the same parameters (silent data corruption on some rank)."""
