import json

import pytest

from trainer.data import index_builder
from trainer.data.dataset import TokenIndex
from trainer.data.make_corpus import generate
from trainer.data.tokenizer import decode
from trainer.errors import DataLoadingError

CORPUS = "trainer/data/corpus/tiny_corpus.jsonl"


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_build_and_read_roundtrip(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [{"body": "hello"}, {"body": "wörld"}])
    out = tmp_path / "a.idx"
    header = index_builder.build_index([src], out, text_key="body")
    idx = TokenIndex(out, [src], "body")
    assert header["num_docs"] == 2 and len(idx.tokens) == len("hello") + len("wörld".encode()) + 2
    assert decode(idx.tokens).split("\x00")[:2] == ["hello", "wörld"]
    assert idx.num_samples(4) == (len(idx.tokens) - 1) // 4
    s = idx.sample(1, 4)
    assert s.tolist() == [int(b) for b in idx.tokens[4:9]]  # seq_len + 1 tokens, shifted target included


def test_missing_index_is_a_clear_error(tmp_path):
    with pytest.raises(DataLoadingError, match=r"not found; build it with: python -m trainer.data.index_builder"):
        TokenIndex(tmp_path / "missing.idx")


def test_truncated_and_foreign_files_are_rejected(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": "x" * 100}])
    out = tmp_path / "a.idx"
    index_builder.build_index([src], out)
    out.write_bytes(out.read_bytes()[:-10])
    with pytest.raises(DataLoadingError, match="truncated"):
        TokenIndex(out)
    (tmp_path / "b.idx").write_text("not an index")
    with pytest.raises(DataLoadingError, match="bad magic"):
        TokenIndex(tmp_path / "b.idx")


def test_stale_index_and_wrong_text_key(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": "one"}])
    out = tmp_path / "a.idx"
    index_builder.build_index([src], out)
    with pytest.raises(DataLoadingError, match="built with text key 'text' but data.text_key is 'body'"):
        TokenIndex(out, [src], "body")
    write_jsonl(src, [{"text": "two"}])
    with pytest.raises(DataLoadingError, match="stale"):
        TokenIndex(out, [src], "text")


def test_bad_records_name_file_and_line(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"text": "ok"}\n{"content": "no key"}\n')
    with pytest.raises(DataLoadingError, match=r"bad.jsonl:2: record has no key 'text'.*data.text_key"):
        index_builder.build_index([src], tmp_path / "x.idx")
    src.write_text('{"text": "ok"}\n{oops\n')
    with pytest.raises(DataLoadingError, match=r"bad.jsonl:2: not valid JSON"):
        index_builder.build_index([src], tmp_path / "x.idx")
    assert not (tmp_path / "x.idx").exists()  # nothing half-written under the final name


def test_cli(tmp_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", [{"text": "abc"}])
    assert index_builder.main(["--data-files", str(src), "--output", str(tmp_path / "o.idx")]) == 0
    assert index_builder.main(["--data-files", str(tmp_path / "none.jsonl"), "--output", str(tmp_path / "p.idx")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_shipped_corpus_and_index_are_current(tmp_path):
    """The committed corpus is what the generator makes, and the committed index matches it."""
    records = [json.loads(line) for line in open(CORPUS)]
    assert records == generate()
    rebuilt = tmp_path / "tiny.idx"
    index_builder.build_index([CORPUS], rebuilt)
    assert rebuilt.read_bytes() == open("trainer/data/corpus/tiny_corpus.idx", "rb").read()
