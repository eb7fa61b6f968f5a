"""bench/recovery_targets.py: prints every row and phase docs/recovery.md quotes, runs the stock pause
case it compares against, labels the docker row's stock figure as local, and names the reps that never
recovered instead of dropping them from the medians. No timing: fabricated rep records."""
import json

import pytest

from .loader import import_bench


@pytest.fixture(scope="module")
def targets():
    yield from import_bench("recovery_targets")


def _rep(case, rdzv, total, det=0.1, note=""):
    phases = {} if total is None else {"detection_s": det, "rendezvous_s": 0.5, "restore_s": 0.14,
                                       "first_step_s": 0.03}
    return {"case": case, "rdzv": rdzv, "total_s": total, "note": note, "injected": True, "load": 1.0,
            **{"detection_s": None, "rendezvous_s": None, "restore_s": None, "first_step_s": None}, **phases}


def _write(out, name, runs):
    (out / f"{name}.json").write_text(json.dumps({"runs": runs}))


@pytest.fixture
def out(tmp_path):
    local = []
    for rdzv in ("etcd-v3", "c10d", "c10d-links"):
        local += [_rep("tuned trainer, kill", rdzv, t) for t in (0.7, 0.8, 0.9, 1.0)]
        local += [_rep("tuned trainer, pause", rdzv, t, det=1.2) for t in (2.0, 2.1, 2.2, 2.3)]
    local += [_rep("tuned trainer, kill", "etcd-v3", None, note="a training step by a new worker not within 120s")]
    for rdzv in ("etcd-v3", "c10d"):
        local += [_rep("stock torchrun+toy, kill", rdzv, 48.0) for _ in range(5)]
        local += [_rep("stock torchrun+toy, pause", rdzv, None, note="not within 45s") for _ in range(5)]
    _write(tmp_path, "local", local)
    _write(tmp_path, "docker", [_rep("tuned trainer, kill", "etcd-v3", t) for t in (0.6, 0.7, 0.8)]
           + [_rep("tuned trainer, pause", "etcd-v3", 1.9, det=1.3)]
           + [_rep("stock torchrun+toy, kill", "etcd-v3", 48.2)])
    return tmp_path


def _printed(targets, out, capsys):
    assert targets.main(["--skip", "local,docker,goodput,false", "--out", str(out)]) == 0
    return capsys.readouterr().out


def test_every_row_the_docs_quote_is_printed_with_per_phase_medians(targets, out, capsys):
    text = _printed(targets, out, capsys)
    for row in ("crash, local, fault -> first step", "crash, docker", "c10d-links), local",
                "torch's c10d (tuned settings, no links)", "silent node (SIGSTOP), local, fault -> first step",
                "silent node (SIGSTOP), local, detection -> first step", "silent node (SIGSTOP), docker, fault",
                "silent node on c10d-links (no etcd witness), local"):
        assert row in text, row
    assert "per phase" in text
    phase_lines = [line for line in text.splitlines() if line.startswith("  ") and "(n=" in line]
    assert any("c10d-links" in line and "silent" in line for line in phase_lines)
    assert any(line.startswith("  crash, docker") and "0.10 / 0.50 / 0.14 / 0.03" in line for line in phase_lines)


def test_a_rep_that_never_recovered_is_counted_and_named_not_dropped(targets, out, capsys):
    text = _printed(targets, out, capsys)
    row = next(line for line in text.splitlines() if line.startswith("crash, local, fault -> first step"))
    # 4 recovered (0.7-1.0) and one not: median of 5 with the missing one slowest = 0.90, not 0.85
    assert "0.90 s (0.70-1.00), 4/5 recovered" in row, row
    assert "tuned trainer, kill (etcd-v3): a training step by a new worker not within 120s" in text


def test_the_stock_pause_case_runs_and_its_non_recovery_is_shown(targets, out, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(targets, "_run", lambda name, argv, out_dir: ran.append((name, argv)))
    assert targets.main(["--out", str(out)]) == 0
    local = dict(ran)["local"]
    assert "--stock-pause" in local
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("silent node (SIGSTOP), local, fault"))
    assert "not recovered (0/5 within the bound)" in row


def test_the_docker_rows_stock_figure_is_labelled_local(targets, out, capsys):
    text = _printed(targets, out, capsys)
    row = next(line for line in text.splitlines() if line.startswith("crash, docker"))
    assert "48.20 s" in row and "stock: local backend" in row
