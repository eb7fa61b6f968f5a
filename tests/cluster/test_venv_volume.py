"""The node image's /opt/venv as a volume: made once per image where the storage driver is slow,
never used half-filled, refused with a way out when the copy fails. docker is faked here; every
docker test and chaos scenario mounts the real one."""
import pytest

from chaosbench.cluster.docker import venv_volume
from chaosbench.cluster.errors import ClusterError


class FakeDocker:
    def __init__(self, driver="fuse-overlayfs", copy_ok=True):
        self.driver, self.copy_ok = driver, copy_ok
        self.volumes: set[str] = set()
        self.calls: list[tuple] = []

    def __call__(self, *args, timeout=60, check=True):
        """docker_cli.docker's contract: stdout; a failure raises with check=True, else gives ""."""
        self.calls.append(args)
        out = self._answer(args)
        if out is None:
            if check:
                raise ClusterError(f"docker {' '.join(args)} failed: boom")
            return ""
        return out

    def _answer(self, args):
        match args:
            case ("info", *_):
                return self.driver + "\n"
            case ("image", "inspect", *_):
                return "sha256:" + "ab" * 32 + "\n"
            case ("volume", "inspect", name):
                return "[{}]" if name in self.volumes else None
            case ("volume", "create", *_, name):
                self.volumes.add(name)
                return name
            case ("volume", "rm", *names):
                self.volumes -= set(names) - {"-f"}
                return ""
            case ("volume", "ls", *_):
                return "\n".join(sorted(self.volumes))
            case ("run", *_):
                return "" if self.copy_ok else None
        raise AssertionError(args)


@pytest.fixture
def docker(monkeypatch):
    fake = FakeDocker()
    monkeypatch.setattr(venv_volume, "_docker", fake)
    monkeypatch.delenv("CHAOSBENCH_VENV_VOLUME", raising=False)
    return fake


def test_made_once_then_reused_from_the_record(docker, tmp_path):
    name = venv_volume.volume_for("img:1", tmp_path, make=True)
    assert name == "chaosbench-venv-" + "ab" * 8 and name in docker.volumes
    runs = sum(c[0] == "run" for c in docker.calls)
    assert venv_volume.volume_for("img:1", tmp_path, make=True) == name
    assert sum(c[0] == "run" for c in docker.calls) == runs == 1   # no second copy


def test_a_volume_removed_behind_our_back_is_made_again(docker, tmp_path):
    name = venv_volume.volume_for("img:1", tmp_path, make=True)
    docker.volumes.clear()
    assert venv_volume.volume_for("img:1", tmp_path, make=True) == name and name in docker.volumes


def test_a_half_filled_volume_without_its_record_is_emptied_first(docker, tmp_path):
    # an earlier copy was cut short: the volume exists but no record says it is whole; docker
    # would not fill a non-empty volume again, so it must be removed before the copy
    docker.volumes.add("chaosbench-venv-" + "ab" * 8)
    venv_volume.volume_for("img:1", tmp_path, make=True)
    kinds = [c[:2] for c in docker.calls]
    assert kinds.index(("volume", "rm")) < kinds.index(("volume", "create")) < kinds.index(("run", "--rm"))


def test_a_native_driver_gets_none_and_the_decision_is_kept(docker, tmp_path):
    docker.driver = "overlay2"
    assert venv_volume.volume_for("img:1", tmp_path, make=True) is None
    assert venv_volume.volume_for("img:1", tmp_path, make=True) is None
    assert sum(c[0] == "info" for c in docker.calls) == 1 and not docker.volumes


@pytest.mark.parametrize("setting,driver,made", [("1", "overlay2", True), ("0", "fuse-overlayfs", False)])
def test_the_setting_overrides_the_driver(docker, tmp_path, monkeypatch, setting, driver, made):
    monkeypatch.setenv("CHAOSBENCH_VENV_VOLUME", setting)
    docker.driver = driver
    assert (venv_volume.volume_for("img:1", tmp_path, make=True) is not None) is made


def test_a_bad_setting_is_named_with_its_values(docker, tmp_path, monkeypatch):
    monkeypatch.setenv("CHAOSBENCH_VENV_VOLUME", "yes")
    with pytest.raises(ClusterError, match=r"CHAOSBENCH_VENV_VOLUME='yes': use 0 .*1 .*auto"):
        venv_volume.volume_for("img:1", tmp_path, make=True)


def test_a_failed_copy_leaves_no_volume_and_no_record_and_says_how_to_opt_out(docker, tmp_path):
    docker.copy_ok = False
    with pytest.raises(ClusterError, match="CHAOSBENCH_VENV_VOLUME=0"):
        venv_volume.volume_for("img:1", tmp_path, make=True)
    assert not docker.volumes and not list(tmp_path.rglob("*ab*"))
    docker.copy_ok = True   # the next call tries again instead of trusting a record
    assert venv_volume.volume_for("img:1", tmp_path, make=True) in docker.volumes


def test_a_new_image_build_prunes_older_volumes(docker, tmp_path):
    docker.volumes.add("chaosbench-venv-old")
    name = venv_volume.volume_for("img:1", tmp_path, make=True, prune_others=True)
    assert docker.volumes == {name}


def test_a_run_uses_only_a_volume_set_up_made_unless_told_to_make_one(docker, tmp_path, monkeypatch):
    # a single run (the main job) would pay a minute of copying for two seconds: it never copies
    assert venv_volume.volume_for("img:1", tmp_path, make=False) is None
    assert not docker.volumes and not any(c[0] == "run" for c in docker.calls)
    name = venv_volume.volume_for("img:1", tmp_path, make=True)          # the test command's set-up
    assert venv_volume.volume_for("img:1", tmp_path, make=False) == name  # every later run mounts it
    from chaosbench.cluster.docker import images
    monkeypatch.setattr(images, "CACHE", tmp_path / "other")
    assert images.node_venv_volume("img:1") is None                     # no record there: not made
    monkeypatch.setenv("CHAOSBENCH_VENV_VOLUME", "1")
    assert images.node_venv_volume("img:1") == name
