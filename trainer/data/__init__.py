"""Data pipeline: byte-level tokenizer, prebuilt token index, stateful resumable sampler."""
