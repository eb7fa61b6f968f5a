"""Build the token index the trainer reads: JSONL documents -> one byte-token stream on disk.

    python -m trainer.data.index_builder --data-files a.jsonl b.jsonl --text-key text --output corpus.idx

File layout: a magic line, one JSON header line (sources with sha256, token count), then the raw
uint8 tokens, so the trainer can memory-map it without parsing. Written to a temp file and renamed,
so a crash never leaves a half-written index under the final name.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

from trainer.data.tokenizer import SEPARATOR, encode
from trainer.errors import DataLoadingError

MAGIC = b"CHAOSBENCH-TOKEN-INDEX v1\n"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_documents(path: Path, text_key: str):
    """Yield the text of each JSONL record; a bad line is an error naming file, line and fix."""
    if not path.is_file():
        raise DataLoadingError(f"data file {path} does not exist")
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataLoadingError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or text_key not in record:
                keys = sorted(record) if isinstance(record, dict) else []
                raise DataLoadingError(f"{path}:{lineno}: record has no key {text_key!r} (keys: {keys}); "
                                       f"set data.text_key / --text-key to the field holding the text")
            if not isinstance(record[text_key], str):
                raise DataLoadingError(f"{path}:{lineno}: {text_key!r} must be a string")
            yield record[text_key]


def build_index(data_files: list[str | Path], output: str | Path, text_key: str = "text") -> dict:
    output = Path(output)
    stream = bytearray()
    sources, n_docs = [], 0
    for f in data_files:
        path = Path(f)
        for text in read_documents(path, text_key):
            stream += encode(text)
            stream.append(SEPARATOR)
            n_docs += 1
        sources.append({"path": str(f), "sha256": sha256_file(path), "size": path.stat().st_size})
    if not stream:
        raise DataLoadingError(f"no documents found in {[str(f) for f in data_files]}")
    header = {"version": 1, "tokenizer": "bytes", "text_key": text_key, "num_docs": n_docs,
              "num_tokens": len(stream), "tokens_sha256": hashlib.sha256(stream).hexdigest(),
              "sources": sources}
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC)
            f.write(json.dumps(header, sort_keys=True).encode() + b"\n")
            f.write(stream)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    return header


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build a byte-token index from JSONL files.")
    ap.add_argument("--data-files", nargs="+", required=True, help="JSONL files, one document per line")
    ap.add_argument("--text-key", default="text", help="JSON field holding the text (default: text)")
    ap.add_argument("--output", required=True, help="index file to write")
    args = ap.parse_args(argv)
    try:
        header = build_index(args.data_files, args.output, args.text_key)
    except DataLoadingError as exc:
        print(f"index_builder: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {header['num_docs']} documents, {header['num_tokens']} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
