"""Errors raised by the checkpoint package.

Messages of save errors start with the tier in brackets (`[NVME] ...`, `[S3] ...`, `[MEMORY] ...`)
because the harness matches on that prefix in `checkpoint_failed` events.
"""


class CheckpointError(Exception):
    """Base class for every checkpoint error."""


class CheckpointConfigError(CheckpointError, ValueError):
    """The `checkpoint` config section is invalid (names the field and the fix)."""


class CheckpointSaveError(CheckpointError):
    """A save to one tier failed; training is expected to continue."""

    def __init__(self, tier: str, message: str):
        self.tier = tier
        super().__init__(f"[{tier.upper()}] {message}")


class MemoryLimitExceeded(CheckpointSaveError):
    """A snapshot does not fit `max_memory_mb` of the memory tier."""

    def __init__(self, message: str):
        super().__init__("memory", f"MemoryLimitExceeded: {message}")


class CheckpointCorrupt(CheckpointError):
    """A checkpoint's manifest, size or checksum is wrong; it must never be loaded."""


class CheckpointLoadError(CheckpointError):
    """A checkpoint could not be loaded (not found, unsafe content, mismatched model)."""
