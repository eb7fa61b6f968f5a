import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def run_copy(tmp_path):
    """A writable copy of a recorded run dir (the fixtures stay untouched)."""
    def copy(name: str) -> Path:
        src = DATA / name
        if not src.is_dir():
            pytest.fail(f"fixture run dir {src} missing: record it (docs/diagnosis.md, Tests)")
        return Path(shutil.copytree(src, tmp_path / name))
    return copy
