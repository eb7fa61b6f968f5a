"""The checkpoint manifest module: one format for the trainer, the instrument helpers and the inventory."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zlib

import pytest

from chaosbench.instrument import manifest as m


def test_checksums_are_self_describing_and_streamed_alike(tmp_path):
    data = b"weights" * 100_000
    f = tmp_path / "state.pt"
    f.write_bytes(data)
    assert m.checksum(data) == f"crc32:{zlib.crc32(data):08x}" == m.file_checksum(f)
    assert m.checksum(data, "sha256") == f"sha256:{hashlib.sha256(data).hexdigest()}" == m.file_checksum(f, "sha256")
    assert m.checksum(data, "blake2b") == m.file_checksum(f, "blake2b")
    assert m.file_checksum(f, "md5") is None
    with pytest.raises(m.ManifestError, match="unknown checksum algorithm 'md5'"):
        m.checksum(data, "md5")


def test_written_manifest_verifies_and_a_flipped_byte_does_not(tmp_path):
    data = b"x" * 1000
    (tmp_path / "state.pt").write_bytes(data)
    m.write(tmp_path, m.make(40, "state.pt", len(data), m.checksum(data, "sha256")))
    assert not list(tmp_path.glob("*.tmp-*"))                     # the temp name was renamed away
    assert m.read(tmp_path)["step"] == 40 and m.step_of(tmp_path) == 40
    assert m.verify_dir(tmp_path) == (True, "sha256 checksum ok")
    (tmp_path / "state.pt").write_bytes(b"y" + data[1:])
    valid, why = m.verify_dir(tmp_path)
    assert valid is False and why.startswith("checksum mismatch")
    (tmp_path / "state.pt").write_bytes(data[:-1])
    assert m.verify_dir(tmp_path) == (False, "size 999 != manifest 1000")


def test_verify_dir_cannot_judge_without_a_manifest_and_names_a_missing_file(tmp_path):
    assert m.verify_dir(tmp_path) == (None, "no manifest.json")
    assert m.verify_dir(tmp_path / "gone") == (None, "removed while inspected (rotated)")
    m.write(tmp_path, m.make(1, "model.pt", 3, "crc32:00000000"))
    assert m.verify_dir(tmp_path) == (False, "manifest names missing file model.pt")
    (tmp_path / m.MANIFEST_FILE).write_text("[1]")
    assert m.verify_dir(tmp_path) == (False, "manifest is not a JSON object")
    assert m.read(tmp_path) is None


def test_strict_parse_names_what_is_wrong():
    good = m.make(7, "state.pt", 3, "crc32:0000abcd")
    assert m.parse(json.dumps(good), "x") == good
    for text, why in (("{", "not valid JSON"), (json.dumps({**good, "format": "other"}), "not a chaosbench-checkpoint"),
                      (json.dumps({**good, "step": "7"}), "'step' missing or not int"),
                      (json.dumps({**good, "checksum": "md5:00"}), "unknown checksum algorithm")):
        with pytest.raises(m.ManifestError, match=why):
            m.parse(text, "x")
    with pytest.raises(m.ManifestError, match="size 2 != manifest bytes 3"):
        m.verify_bytes(good, b"ab", "x")
    with pytest.raises(m.ManifestError, match="checksum crc32:"):
        m.verify_bytes(good, b"abc", "x")


def test_file_roles_from_the_manifest(tmp_path):
    (tmp_path / "__0_0.distcp").write_bytes(b"a")
    (tmp_path / ".metadata").write_bytes(b"b")
    (tmp_path / "old.pt").write_bytes(b"c")
    (tmp_path / "state.pt.tmp-99").write_bytes(b"d")
    (tmp_path / ".tmp-part").mkdir()
    (tmp_path / ".tmp-part" / "x").write_bytes(b"e")
    m.write(tmp_path, m.make(3, ".metadata", 1, m.checksum(b"b"), files={"__0_0.distcp": m.checksum(b"a"),
                                                                          ".metadata": m.checksum(b"b")}))
    assert m.file_roles(tmp_path) == {".metadata": "data", ".tmp-part/x": "temporary", "__0_0.distcp": "data",
                                      "manifest.json": "manifest", "old.pt": "other", "state.pt.tmp-99": "temporary"}


def test_file_roles_without_a_manifest_calls_every_committed_file_data(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"a")
    (tmp_path / "weights.bin.partial").write_bytes(b"b")
    assert m.file_roles(tmp_path) == {"weights.bin": "data", "weights.bin.partial": "temporary"}
    assert m.file_roles(tmp_path / "missing") == {}


def test_the_reference_trainer_writes_this_format(tmp_path):
    from trainer.checkpoint.local_store import LocalStore
    from trainer.checkpoint import fmt
    data = b"state" * 50
    store = LocalStore("nvme", str(tmp_path), keep_last=2, fsync=False)
    where = store.save(40, data, fmt.make_manifest(40, data, fmt.checksum(data, "blake2b")))
    assert m.verify_dir(where) == (True, "blake2b checksum ok")
    assert m.file_roles(where) == {"manifest.json": "manifest", "state.pt": "data"}


def test_importing_it_pulls_in_neither_torch_nor_the_harness():
    code = ("import sys, chaosbench.instrument.manifest; "
            "bad = [n for n in ('torch', 'yaml', 'pydantic', 'chaosbench.cluster', 'chaosbench.checks') "
            "if n in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
