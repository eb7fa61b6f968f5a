"""cb.load never unpickles arbitrary objects unless asked: it passes weights_only=True to torch.load
itself (torch < 2.6, which pyproject allows, defaults to full unpickling)."""
import pytest

import chaosbench.instrument as cb


def test_load_passes_weights_only_true_unless_told_otherwise(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    path = tmp_path / "snapshot.pt"
    cb.save({"w": torch.arange(2.0)}, path, step=1)
    seen = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    cb.load(path)
    cb.load(path, weights_only=False)   # the caller's explicit choice stands
    assert [kw.get("weights_only") for kw in seen] == [True, False]


class Payload:
    def __reduce__(self):
        return (print, ("code ran while loading",))


def test_load_refuses_a_pickled_object_by_default(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    path = tmp_path / "evil.pt"
    torch.save({"x": Payload()}, path)
    with pytest.raises(Exception):
        cb.load(path)
    assert "code ran" not in capsys.readouterr().out
