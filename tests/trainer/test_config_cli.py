"""`python -m trainer.config --check`: how the harness validates reference-trainer overrides without
importing the trainer (chaosbench.reference_trainer)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chaosbench import reference_trainer
from chaosbench.reference_trainer import DEFAULT_CONFIG, check_config

ROOT = Path(__file__).resolve().parents[2]


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "trainer.config", *args], capture_output=True, text=True, cwd=ROOT)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout else None


def test_valid_config_prints_the_merged_config():
    rc, out = cli("--check", DEFAULT_CONFIG, "--set", "training.max_steps=7", "--set", "checkpoint.s3.interval=3")
    assert rc == 0 and out["valid"] is True
    assert out["config"]["training"]["max_steps"] == 7 and out["config"]["checkpoint"]["s3"]["interval"] == 3


def test_invalid_override_exits_2_with_section_field_and_message():
    rc, out = cli("--check", DEFAULT_CONFIG, "--set", "scaling.strategy=fast")
    assert rc == 2 and out["valid"] is False
    (err,) = out["errors"]
    assert err["section"] == "scaling" and err["field"] == "strategy"
    assert err["valid_options"] == ["variable_batch", "constant_batch"]
    assert "scaling.strategy is 'fast'" in err["message"] and DEFAULT_CONFIG in err["message"]


def test_missing_file_and_malformed_assignment_are_answers_not_crashes():
    assert cli("--check", "nope.yaml")[1]["errors"][0]["message"] == "config file nope.yaml not found"
    rc, out = cli("--check", DEFAULT_CONFIG, "--set", "max_steps")
    assert rc == 2 and "expected section.field=value" in out["errors"][0]["message"]


def test_check_config_reads_the_answer_and_remembers_an_unchanged_file(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("training: {max_steps: 11}\n")
    first = check_config(cfg, [])
    assert first.valid and first.config["training"]["max_steps"] == 11
    assert check_config(cfg, []) is first                        # same file, same overrides: no new process
    cfg.write_text("training: {max_steps: 0}\n")                 # an edit is a new question
    again = check_config(cfg, [])
    assert not again.valid and again.errors[0]["field"] == "max_steps"


def test_check_config_without_the_trainer_installed_is_none_and_a_broken_validator_raises(monkeypatch, tmp_path):
    answers = iter([subprocess.CompletedProcess([], 1, "", "python: Error while finding module specification for "
                                                "'trainer.config' (ModuleNotFoundError: No module named 'trainer')"),
                    subprocess.CompletedProcess([], 1, "", "Traceback...\nKeyError: 'x'")])
    monkeypatch.setattr(reference_trainer.subprocess, "run", lambda *a, **k: next(answers))
    assert check_config(tmp_path / "a.yaml", []) is None
    with pytest.raises(RuntimeError, match="KeyError: 'x'"):
        check_config(tmp_path / "b.yaml", [])


def test_loading_a_scenario_does_not_import_the_trainer(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(textwrap.dedent(f"""\
        name: s
        trainer: {{config: {DEFAULT_CONFIG}, overrides: {{training.max_steps: 30}}}}
        expect: {{reaches_step: 30}}
        """))
    code = (f"import sys; from chaosbench.scenario.loader import load_scenario; load_scenario({str(sc)!r}); "
            "print(sorted(m for m in sys.modules if m == 'trainer' or m.startswith('trainer.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
