"""The deps image's lock (the host venv's `pip freeze`) is kept per installed set: a run reads it
back instead of paying pip's start-up, and any install, upgrade or removal asks pip again."""
import os
import sys

import pytest

from chaosbench.cluster.docker import images


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory on the interpreter's path holding one package's install metadata; pip is faked."""
    pkgs = tmp_path / "site-packages"
    (pkgs / "alpha-1.0.dist-info").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(pkgs)])
    monkeypatch.setattr(images, "CACHE", tmp_path / "cache")
    calls = []

    def freeze():
        calls.append(1)
        return "".join("==".join(p.name.removesuffix(".dist-info").split("-")) + "\n"
                       for p in sorted(pkgs.iterdir()))
    monkeypatch.setattr(images, "_freeze", freeze)
    return pkgs, calls


def test_the_lock_is_read_back_while_nothing_is_installed(site):
    _, calls = site
    assert images.lock_requirements() == "alpha==1.0\n"
    assert images.lock_requirements() == "alpha==1.0\n"
    assert len(calls) == 1


@pytest.mark.parametrize("change", ["install", "upgrade", "remove"])
def test_any_change_to_the_installed_set_asks_pip_again(site, change):
    pkgs, calls = site
    images.lock_requirements()
    if change == "install":
        (pkgs / "beta-2.0.dist-info").mkdir()
        expected = "alpha==1.0\nbeta==2.0\n"
    elif change == "upgrade":
        (pkgs / "alpha-1.0.dist-info").rename(pkgs / "alpha-1.1.dist-info")
        expected = "alpha==1.1\n"
    else:
        (pkgs / "alpha-1.0.dist-info").rmdir()
        expected = ""
    assert images.lock_requirements() == expected
    assert len(calls) == 2


def test_a_reinstall_of_the_same_version_asks_pip_again(site):
    """Same name and version, new files (a reinstall from another source): its metadata's mtime moves."""
    pkgs, calls = site
    images.lock_requirements()
    meta = pkgs / "alpha-1.0.dist-info"
    meta.rmdir()
    meta.mkdir()
    st = os.stat(meta)
    os.utime(meta, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    images.lock_requirements()
    assert len(calls) == 2


def test_the_lock_is_written_aside_and_renamed_into_place(site):
    """Written to a temporary name, then renamed: no temporary file stays behind, only the lock."""
    pkgs, calls = site
    images.lock_requirements()
    cached = list((images.CACHE / "locks").iterdir())
    assert [p.suffix for p in cached] == [".txt"]


def test_files_written_beside_the_installed_set_change_nothing(site, tmp_path, monkeypatch):
    """A checkout on the path (pytest puts test folders there) gains files all the time: no new freeze."""
    pkgs, calls = site
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.setattr(sys, "path", [str(checkout), str(pkgs)])
    images.lock_requirements()
    (checkout / "reports").mkdir()
    (pkgs / "some_module.py").write_text("")
    images.lock_requirements()
    assert len(calls) == 1
