"""Read a token index (built by `trainer.data.index_builder`) and cut it into fixed-length samples.

Sample i is tokens[i*seq_len : i*seq_len + seq_len + 1] (inputs plus the shifted target), so the
sample set is a pure function of the index and seq_len — any world size sees the same samples.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from trainer.data.index_builder import MAGIC, sha256_file
from trainer.errors import DataLoadingError

_FIX = "build it with: python -m trainer.data.index_builder --data-files <files.jsonl> --output {path}"


class TokenIndex:
    def __init__(self, path: str | Path, data_files: list[str | Path] | None = None, text_key: str | None = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise DataLoadingError(f"token index {self.path} not found; " + _FIX.format(path=self.path))
        with open(self.path, "rb") as f:
            magic = f.read(len(MAGIC))
            header_line = f.readline()
        if magic != MAGIC:
            raise DataLoadingError(f"{self.path} is not a chaosbench token index (bad magic); " + _FIX.format(path=self.path))
        try:
            self.header = json.loads(header_line)
        except json.JSONDecodeError:
            raise DataLoadingError(f"{self.path}: corrupt header; " + _FIX.format(path=self.path)) from None
        offset = len(MAGIC) + len(header_line)
        n = int(self.header["num_tokens"])
        if self.path.stat().st_size != offset + n:
            raise DataLoadingError(f"{self.path}: truncated or oversized (expected {offset + n} bytes, "
                                   f"found {self.path.stat().st_size}); " + _FIX.format(path=self.path))
        if text_key is not None and self.header.get("text_key") != text_key:
            raise DataLoadingError(f"{self.path} was built with text key {self.header.get('text_key')!r} but "
                                   f"data.text_key is {text_key!r}; rebuild the index with --text-key {text_key}")
        if data_files is not None:
            self._check_sources(data_files)
        self.tokens = np.memmap(self.path, dtype=np.uint8, mode="r", offset=offset, shape=(n,))

    def _check_sources(self, data_files) -> None:
        """An index built from other or older data files would silently train on the wrong data."""
        built = [s["sha256"] for s in self.header["sources"]]
        for f in data_files:
            if not Path(f).is_file():
                raise DataLoadingError(f"data file {f} listed in data.files does not exist")
        current = [sha256_file(Path(f)) for f in data_files]
        if current != built:
            raise DataLoadingError(f"token index {self.path} is stale: it was built from "
                                   f"{[s['path'] for s in self.header['sources']]} with different contents; "
                                   + _FIX.format(path=self.path))

    def num_samples(self, seq_len: int) -> int:
        return max(0, (len(self.tokens) - 1) // seq_len)

    def sample(self, i: int, seq_len: int) -> torch.Tensor:
        start = i * seq_len
        return torch.from_numpy(np.asarray(self.tokens[start:start + seq_len + 1], dtype=np.int64))

    def batch(self, indices, seq_len: int) -> torch.Tensor:
        if len(indices) == 0:
            return torch.empty(0, seq_len + 1, dtype=torch.long)
        return torch.stack([self.sample(int(i), seq_len) for i in indices])
