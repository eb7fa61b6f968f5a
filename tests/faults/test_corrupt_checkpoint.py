"""corrupt_checkpoint picks the file to flip by the checkpoint manifest's roles (docs/manifest.md),
not by guessing from names."""
import os

from chaosbench.faults.storage import newest_checkpoint_file
from chaosbench.instrument import manifest


def save(d, files: dict[str, bytes], named=None, t=None):
    """A committed checkpoint: its files, then the manifest naming `named` (default: the first file)."""
    d.mkdir(parents=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
    first = named or next(iter(files))
    man = manifest.make(40, first, len(files[first]), manifest.checksum(files[first]))
    if named is None and len(files) > 1:
        man["files"] = {n: manifest.checksum(b) for n, b in files.items()}
    manifest.write(d, man)
    if t is not None:
        for p in d.iterdir():
            os.utime(p, (t, t))


def test_the_file_the_manifest_names_not_the_largest_one(tmp_path):
    # an older, larger save the manifest no longer names shares the folder (cb.save's one-per-folder)
    save(tmp_path / "ckpt", {"model.pt": b"m" * 100, "old-model.pt": b"o" * 5000}, named="model.pt")
    assert newest_checkpoint_file(tmp_path) == tmp_path / "ckpt" / "model.pt"


def test_a_multi_file_checkpoint_gives_its_largest_named_file(tmp_path):
    save(tmp_path / "step-40", {".metadata": b"x" * 10, "__0_0.distcp": b"y" * 900})
    assert newest_checkpoint_file(tmp_path).name == "__0_0.distcp"


def test_an_uncommitted_write_is_never_the_newest_checkpoint(tmp_path):
    save(tmp_path / "step-40", {"state.pt": b"a" * 100}, t=1000)
    tmp = tmp_path / ".tmp-step-50-123"           # killed mid-write: data, even a manifest, no rename
    save(tmp, {"state.pt": b"b" * 999}, t=2000)
    path = newest_checkpoint_file(tmp_path)
    assert path == tmp_path / "step-40" / "state.pt"


def test_the_newest_committed_checkpoint_wins_and_is_then_invalid(tmp_path):
    from chaosbench.faults.storage import flip_byte
    save(tmp_path / "step-20", {"state.pt": b"a" * 100}, t=1000)
    save(tmp_path / "step-40", {"state.pt": b"b" * 100}, t=2000)
    flip_byte(newest_checkpoint_file(tmp_path))
    assert manifest.verify_dir(tmp_path / "step-20")[0] is True
    assert manifest.verify_dir(tmp_path / "step-40")[0] is False


def test_a_job_without_manifests_gets_its_newest_folders_largest_file(tmp_path):
    old, new = tmp_path / "a", tmp_path / "b"
    old.mkdir(), new.mkdir()
    (old / "big.bin").write_bytes(b"o" * 5000)
    (new / "small.bin").write_bytes(b"n" * 10)
    (new / "weights.bin").write_bytes(b"w" * 100)
    (new / "weights.bin.tmp-7").write_bytes(b"t" * 9000)
    os.utime(old / "big.bin", (1, 1))
    assert newest_checkpoint_file(tmp_path) == new / "weights.bin"


def test_nothing_to_corrupt(tmp_path):
    assert newest_checkpoint_file(tmp_path) is None
    (tmp_path / ".chaosbench-fill").write_bytes(b"\0" * 100)
    assert newest_checkpoint_file(tmp_path) is None
