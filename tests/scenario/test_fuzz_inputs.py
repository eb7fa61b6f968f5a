"""Seeded fuzzing of every file a user hands the harness: scenario files, trainer configs, result.json
and event lines. Bad input must end in the documented error that names the file (exit 2 from the
CLI), never a traceback. Mutations start from real files (the scenario library, the trainer configs,
a realistic run directory) so they reach deep into validation, not only the YAML parser.

Every other trial is certainly bad (invalid UTF-8, an unknown top-level key, a section that is no
mapping, a record that is no JSON object) and must be refused: a validator that accepts everything
fails these tests, not only one that crashes.

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


def _certainly_bad(rng: random.Random, raw: bytes) -> tuple[bytes, str]:
    """A YAML file damaged in a way no loader may accept, and how."""
    data = yaml.safe_load(raw)
    how = rng.choice(["utf8", "unknown key", "section"])
    if how == "utf8":
        lines = raw.split(b"\n")
        i = rng.randrange(len(lines))
        lines[i] = lines[i] + b" #\xff\xfe"
        return b"\n".join(lines), how
    if how == "unknown key":
        data["zz_no_such_key"] = rng.choice(WEIRD)
    else:
        data[rng.choice([k for k, v in data.items() if isinstance(v, dict)])] = rng.choice([[1, "a"], "x", 7])
    return yaml.safe_dump(data, allow_unicode=True).encode(), how


def _fuzz_yaml(tmp_path, sources, load, error, prefix):
    """(refused, certainly bad ones among them); every certainly bad file must be refused naming it."""
    rng = random.Random(SEED)
    refused = bad = 0
    for trial in range(TRIALS):
        src = rng.choice(sources)
        path = tmp_path / f"{prefix}{trial}.yaml"
        must = trial % 2 == 1
        raw, how = _certainly_bad(rng, src.read_bytes()) if must else (_variants(rng, src.read_bytes()), "")
        path.write_bytes(raw)
        try:
            load(path)
        except error as e:
            assert str(path) in str(getattr(e, "problems", None) or e), (trial, str(e))
            refused += 1
            bad += must
            continue
        except Exception as e:   # a traceback for the user: report the reproducer
            pytest.fail(f"trial {trial} (seed {SEED}, from {src.name}): {type(e).__name__}: {e}\n"
                        f"{path.read_bytes()[:2000]!r}")
        assert not must, f"trial {trial} (seed {SEED}, from {src.name}): accepted a file with {how}:\n{raw[:2000]!r}"
    assert bad == TRIALS // 2
    return refused, bad


def test_bad_scenario_files_end_in_scenario_error(tmp_path, record_property):
    def load(path):
        load_scenario(path)
    refused, bad = _fuzz_yaml(tmp_path, sorted((REPO / "scenarios").glob("*.yaml")), load, ScenarioError, "t")
    record_property("trials", f"{TRIALS} mutated scenario files (seed {SEED}): {refused} refused with the file "
                              f"named (all {bad} certainly bad ones among them), {TRIALS - refused} still valid, "
                              "0 tracebacks")


def test_bad_trainer_configs_end_in_configuration_error(tmp_path, record_property):
    configs = sorted((REPO / "trainer" / "configs").glob("*.yaml"))
    refused, bad = _fuzz_yaml(tmp_path, configs, load_config, ConfigurationError, "c")
    record_property("trials", f"{TRIALS} mutated trainer configs (seed {SEED}): {refused} refused with the file "
                              f"named (all {bad} certainly bad ones among them), {TRIALS - refused} still valid, "
                              "0 tracebacks")


def test_bad_result_json_and_event_lines_end_in_report_input_error(tmp_path, record_property):
    rng = random.Random(SEED)
    good = build(tmp_path / "good")
    result = json.loads((good / "result.json").read_text())
    refused = bad = 0
    for trial in range(REPORT_TRIALS):
        run = tmp_path / f"r{trial}"
        shutil.copytree(good, run)
        must = trial % 3 == 2   # certainly bad: a result.json that is cut short or no JSON object
        if must:
            raw = (good / "result.json").read_bytes()
            (run / "result.json").write_bytes(rng.choice([raw[:rng.randrange(1, len(raw) // 2)], b"[1, 2]",
                                                          b"null", b"\xff\xfe"]))
        elif rng.random() < 0.5:
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
            bad += must
            continue
        except Exception as e:
            pytest.fail(f"trial {trial} (seed {SEED}): {type(e).__name__}: {e}")
        assert not must, f"trial {trial} (seed {SEED}): rendered a result.json that is no JSON object"
    assert bad == REPORT_TRIALS // 3
    record_property("trials", f"{REPORT_TRIALS} damaged run records (seed {SEED}): {refused} refused (all {bad} "
                              f"certainly bad ones among them), {REPORT_TRIALS - refused} rendered, 0 tracebacks")


@pytest.mark.parametrize("content", [b"name: x\ndescription: caf\xe9\n", b"\xff\xfe\x00n\x00a"])
def test_cli_validate_exits_2_on_a_file_that_is_not_utf8(tmp_path, content):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "validate", str(path)], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "not UTF-8" in r.stderr and str(path) in r.stderr


def test_a_recursive_yaml_anchor_is_refused_naming_the_file(tmp_path):
    """Found by the fuzzer: `&a {node: *a}` made the loader recurse until RecursionError."""
    path = tmp_path / "loop.yaml"
    path.write_text("&id001\nnode: *id001\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert str(path) in str(e.value.problems) and "anchors and aliases" in str(e.value.problems)
