"""Byte-level tokenizer: token id = UTF-8 byte value (vocab 256); nothing to download."""
from __future__ import annotations

VOCAB_SIZE = 256
SEPARATOR = 0  # NUL byte separates documents in the token stream; it never appears in text


def encode(text: str) -> bytes:
    return text.replace("\x00", "").encode("utf-8")


def decode(tokens) -> str:
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")
