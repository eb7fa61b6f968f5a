"""The failure model of a forecast: a built-in preset, or a user's YAML/JSON file, validated.

    name: my-fleet                      # optional
    source: "our incident log, 2026"    # optional, printed with the forecast
    causes:
      - {name: gpu, class: node_loss, per_gpu_hour: 1.2e-5}
      - {name: nccl_timeout, class: hung_rank, per_node_day: 0.004}

Every problem is reported as file:line: field: fix (exit 2), all of them at once.
"""
from __future__ import annotations

import difflib
import math
from pathlib import Path

import yaml

from . import CLASSES, ForecastError
from .presets import PRESETS, Cause, FailureModel

TOP_KEYS = ("name", "source", "causes")
CAUSE_KEYS = ("name", "class", "per_gpu_hour", "per_node_day")


def _lines(node, path=(), out=None) -> dict:
    """Key path -> 1-based line (JSON is read as YAML, so both files get line numbers)."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            out[path + (k.value,)] = k.start_mark.line + 1
            _lines(v, path + (k.value,), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out[path + (i,)] = v.start_mark.line + 1
            _lines(v, path + (i,), out)
    return out


def _nearest(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f"did you mean '{close[0]}'? " if close else ""


def load_failure_file(path: Path) -> FailureModel:
    src = str(path)
    try:
        text = path.read_text(encoding="utf-8")
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except OSError as e:
        raise ForecastError(f"{src}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ForecastError(f"{src}: not UTF-8 text; save the file as UTF-8") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ForecastError(f"{src}:{mark.line + 1 if mark else 1}: not valid YAML/JSON: "
                            f"{getattr(e, 'problem', e)}") from None
    lines = _lines(node) if node is not None else {}
    problems: list[str] = []

    def bad(loc: tuple, msg: str):
        line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), 1)
        field = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[") or "(top)"
        problems.append(f"{src}:{line}: {field}: {msg}")

    if not isinstance(data, dict):
        raise ForecastError(f"{src}:1: (top): expected a mapping with a 'causes' list; see docs/plan-a-run.md")
    for k in data:
        if k not in TOP_KEYS:
            bad((k,), f"unknown key; {_nearest(k, TOP_KEYS)}valid: {', '.join(TOP_KEYS)}")
    causes = data.get("causes")
    if not isinstance(causes, list) or not causes:
        bad(("causes",), "a non-empty list of causes is required, each {name, class, per_gpu_hour | per_node_day}")
        causes = []
    out, seen = [], set()
    for i, c in enumerate(causes):
        loc = ("causes", i)
        if not isinstance(c, dict):
            bad(loc, "each cause is a mapping {name, class, per_gpu_hour | per_node_day}")
            continue
        for k in c:
            if k not in CAUSE_KEYS:
                bad(loc + (k,), f"unknown key; {_nearest(k, CAUSE_KEYS)}valid: {', '.join(CAUSE_KEYS)}")
        name = c.get("name")
        if not isinstance(name, str) or not name:
            bad(loc + ("name",), "a cause needs a name (text)")
        elif name in seen:
            bad(loc + ("name",), f"duplicate cause '{name}'; merge the two rates")
        seen.add(name)
        klass = c.get("class")
        if klass not in CLASSES:
            bad(loc + ("class",), f"'{klass}' is not a fault class; {_nearest(klass, CLASSES)}valid: {', '.join(CLASSES)}")
        rates = [k for k in ("per_gpu_hour", "per_node_day") if k in c]
        if len(rates) != 1:
            bad(loc, "give exactly one rate: per_gpu_hour or per_node_day")
            continue
        value = c[rates[0]]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            bad(loc + (rates[0],), f"{value!r} is not a number; give failures {rates[0].replace('_', ' ')}, e.g. 1.0e-5")
            continue
        if value < 0:
            bad(loc + (rates[0],), f"{value} is negative; a rate is >= 0 failures {rates[0].replace('_', ' ')}")
            continue
        out.append(Cause(str(name), str(klass), **{rates[0]: float(value)}))
    if problems:
        raise ForecastError("\n".join(problems))
    model = FailureModel(str(data.get("name") or path.stem), str(data.get("source") or src), out)
    model.notes.append(f"{model.name}: user rates from {src}, constant (linear in GPUs or nodes)")
    return model


def failure_model(spec: str) -> FailureModel:
    """A preset name, or a path to a user file."""
    if spec in PRESETS:
        return PRESETS[spec]()
    p = Path(spec)
    if p.suffix.lower() in (".yaml", ".yml", ".json") or p.exists():
        if not p.is_file():
            raise ForecastError(f"--failures: no file '{spec}'; give a preset ({', '.join(PRESETS)}) or a YAML/JSON file")
        return load_failure_file(p)
    raise ForecastError(f"--failures: unknown preset '{spec}'; {_nearest(spec, PRESETS)}presets: "
                        f"{', '.join(PRESETS)}, or a YAML/JSON file of causes (docs/plan-a-run.md)")
