import pytest

from .rundir import build


@pytest.fixture
def passing_run(tmp_path):
    return build(tmp_path / "node_loss-20261121-050000-pass", passing=True)


@pytest.fixture
def failing_run(tmp_path):
    return build(tmp_path / "node_loss-20261121-051000-fail", passing=False)
