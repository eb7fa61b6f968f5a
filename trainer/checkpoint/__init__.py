"""Tiered checkpointing (memory → NVMe → S3): asynchronous, verified, agreed across ranks."""
from .config import CheckpointConfig, S3Config
from .errors import (CheckpointConfigError, CheckpointCorrupt, CheckpointError, CheckpointLoadError,
                     CheckpointSaveError, MemoryLimitExceeded)
from .manager import CheckpointManager
from .model_io import load_checkpoint_to_model

__all__ = ["CheckpointManager", "CheckpointConfig", "S3Config",
           "load_checkpoint_to_model", "CheckpointError", "CheckpointConfigError", "CheckpointCorrupt",
           "CheckpointLoadError", "CheckpointSaveError", "MemoryLimitExceeded"]
