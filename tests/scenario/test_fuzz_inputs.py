"""Seeded fuzzing of every file a user hands the harness: scenario files, trainer configs, result.json
and event lines. Bad input must end in the documented error that names the file (exit 2 from the
CLI), never a traceback. Mutations start from real files (the scenario library, the trainer configs,
a realistic run directory) so they reach deep into validation, not only the YAML parser.

TRIALS per input kind is kept small enough for CI (about a second each); FUZZ_TRIALS raises it.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chaosbench.report import ReportInputError, render_run
from chaosbench.scenario import ScenarioError, load_scenario
from trainer.config import load_config
from trainer.errors import ConfigurationError

from tests.report.rundir import build

REPO = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("FUZZ_TRIALS", "150"))
REPORT_TRIALS = max(TRIALS // 6, 10)   # a render takes ~0.2 s
SEED = int(os.environ.get("FUZZ_SEED", "18"))
WEIRD = [None, True, False, 0, -1, 1, 2, 3, 17, 10**12, -10**12, 0.5, -0.5, float("inf"), "", "x", "node-9",
         "random", "memory", "nvme", "s3", "none", "é\u202e", [], [1, "a"], {}, {"a": 1}, {"node": 5},
         "[unclosed", "(?P<step", "1e-3", "null"]


def _mutate_tree(rng: random.Random, data, depth: int = 0):
    """One random structural change somewhere in a YAML/JSON tree: drop, replace, retype or add a key."""
    if isinstance(data, dict) and data and (depth > 3 or rng.random() < 0.6):
        key = rng.choice(list(data))
        op = rng.random()
        if op < 0.25:
            del data[key]
        elif op < 0.55:
            data[key] = rng.choice(WEIRD)
        elif op < 0.65:
            data[rng.choice(["extra", "kill_worker", "expect", "local_rank", 3, "node"])] = rng.choice(WEIRD)
        else:
            data[key] = _mutate_tree(rng, data[key], depth + 1)
        return data
    if isinstance(data, list) and data:
        i = rng.randrange(len(data))
        if rng.random() < 0.3:
            data.pop(i)
        else:
            data[i] = _mutate_tree(rng, data[i], depth + 1)
        return data
    if isinstance(data, (dict, list)):
        return rng.choice(WEIRD)
    return rng.choice(WEIRD)


def _mutate_bytes(rng: random.Random, raw: bytes) -> bytes:
    """Byte-level damage: invalid UTF-8, truncation, a stray tab or colon, a NUL."""
    b = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(b) + 1)
        junk = rng.choice([b"\xff", b"\xc3", b"\x00", b"\t", b":", b"- ", b"{", b"]", b"&a", b"*a", b"!!python/object"])
        if rng.random() < 0.2:
            del b[pos:]
        else:
            b[pos:pos] = junk
    return bytes(b)


def _variants(rng: random.Random, raw: bytes):
    if rng.random() < 0.35:
        return _mutate_bytes(rng, raw)
    data = yaml.safe_load(raw)
    for _ in range(rng.randint(1, 3)):
        data = _mutate_tree(rng, data)
    return yaml.safe_dump(data, allow_unicode=True).encode()


def test_bad_scenario_files_end_in_scenario_error(tmp_path, record_property):
    rng = random.Random(SEED)
    library = sorted((REPO / "scenarios").glob("*.yaml"))
    refused = 0
    for trial in range(TRIALS):
        src = rng.choice(library)
        path = tmp_path / f"t{trial}.yaml"
        path.write_bytes(_variants(rng, src.read_bytes()))
        try:
            load_scenario(path)
        except ScenarioError as e:
            assert e.problems and all(str(path) in p for p in e.problems), (trial, e.problems)
            refused += 1
        except Exception as e:   # a traceback for the user: report the reproducer
            pytest.fail(f"trial {trial} (seed {SEED}, from {src.name}): {type(e).__name__}: {e}\n"
                        f"{path.read_bytes()[:2000]!r}")
    record_property("trials", f"{TRIALS} mutated scenario files (seed {SEED}): {refused} refused with the file "
                              f"named, {TRIALS - refused} still valid, 0 tracebacks")


def test_bad_trainer_configs_end_in_configuration_error(tmp_path, record_property):
    rng = random.Random(SEED)
    configs = sorted((REPO / "trainer" / "configs").glob("*.yaml"))
    refused = 0
    for trial in range(TRIALS):
        src = rng.choice(configs)
        path = tmp_path / f"c{trial}.yaml"
        path.write_bytes(_variants(rng, src.read_bytes()))
        try:
            load_config(path)
        except ConfigurationError as e:
            assert str(path) in str(e), (trial, str(e))
            refused += 1
        except Exception as e:
            pytest.fail(f"trial {trial} (seed {SEED}, from {src.name}): {type(e).__name__}: {e}\n"
                        f"{path.read_bytes()[:2000]!r}")
    record_property("trials", f"{TRIALS} mutated trainer configs (seed {SEED}): {refused} refused with the file "
                              f"named, {TRIALS - refused} still valid, 0 tracebacks")


def test_bad_result_json_and_event_lines_end_in_report_input_error(tmp_path, record_property):
    rng = random.Random(SEED)
    good = build(tmp_path / "good")
    result = json.loads((good / "result.json").read_text())
    refused = 0
    for trial in range(REPORT_TRIALS):
        run = tmp_path / f"r{trial}"
        shutil.copytree(good, run)
        if rng.random() < 0.5:
            data = json.loads(json.dumps(result))
            for _ in range(rng.randint(1, 3)):
                data = _mutate_tree(rng, data)
            raw = json.dumps(data, default=str).encode()
            (run / "result.json").write_bytes(_mutate_bytes(rng, raw) if rng.random() < 0.2 else raw)
        else:   # damaged event lines, and a result.json without the timeline so the report parses them
            (run / "result.json").write_text(json.dumps({k: v for k, v in result.items() if k != "timeline"}))
            for ev in (run / "events").iterdir():
                lines = ev.read_bytes().splitlines()
                for _ in range(rng.randint(1, 4)):
                    i = rng.randrange(len(lines))
                    try:
                        obj = json.loads(lines[i])
                    except ValueError:   # torn by an earlier mutation
                        obj = None
                    if obj is None or rng.random() < 0.5:
                        lines[i] = _mutate_bytes(rng, lines[i])
                    else:
                        lines[i] = json.dumps(_mutate_tree(rng, obj), default=str).encode()
                ev.write_bytes(b"\n".join(lines))
        try:
            render_run(run)
        except ReportInputError as e:
            assert "result.json" in str(e) or str(run) in str(e), (trial, str(e))
            refused += 1
        except Exception as e:
            pytest.fail(f"trial {trial} (seed {SEED}): {type(e).__name__}: {e}")
    record_property("trials", f"{REPORT_TRIALS} damaged run records (seed {SEED}): {refused} refused, "
                              f"{REPORT_TRIALS - refused} rendered, 0 tracebacks")


@pytest.mark.parametrize("content", [b"name: x\ndescription: caf\xe9\n", b"\xff\xfe\x00n\x00a"])
def test_cli_validate_exits_2_on_a_file_that_is_not_utf8(tmp_path, content):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "validate", str(path)], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "not UTF-8" in r.stderr and str(path) in r.stderr
