"""Trainer configuration: defaults, YAML loading, `--set section.field=value` overrides, validation.

The validator collects every problem at once (`validate_config`) so a user fixes a file in one go;
`load_config` raises the first error as a `ConfigurationError` naming section, field and the fix.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from trainer.errors import ConfigurationError

STRATEGIES = ["variable_batch", "constant_batch"]


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-3` as a float (YAML 1.1 would make it a string), and refuses
    aliases (an alias bomb expands exponentially in the merge and in error messages) and duplicate
    keys (YAML would keep the last one without a word)."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.events.AliasEvent):
            raise yaml.YAMLError(f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not accepted "
                                 f"in a trainer config; write the value out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                raise yaml.YAMLError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r} (first on line "
                                     f"{seen[key]}); keep one of them")
            seen.setdefault(key, key_node.start_mark.line + 1)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _yaml(text: str):
    return yaml.load(text, Loader=_Loader)  # noqa: S506 — a SafeLoader subclass

DEFAULTS: dict[str, Any] = {
    "training": {
        "max_steps": 100,
        "seed": 1234,
        "lr": 3.0e-3,
        "per_worker_batch_size": 8,
        "seq_len": 64,
        "log_every": 1,
        "step_sleep_s": 0.0,      # throttle so a chaos scenario can hit a given step
        "model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 256, "max_seq_len": 128},
    },
    "scaling": {"strategy": "variable_batch", "target_global_batch_size": None},
    "elastic": {
        "min_nodes": 1,
        "max_nodes": 1,
        "health_check_interval_steps": 1,   # how often the training thread checks the heartbeat
        "health_check_interval_s": 1.0,     # heartbeat period (a collective on its own gloo group)
        "health_check_timeout_s": 5.0,
        "pg_timeout_s": 30.0,
    },
    "checkpoint": {
        "memory_snapshot_interval": 5,   # steps; 0 disables the tier (same for the intervals below)
        "max_snapshots": 2,
        "max_memory_mb": 1024,
        "memory_dir": None,        # null -> /dev/shm/chaosbench/<run_id>/<node>
        "checkpoint_interval": 20,
        "nvme_dir": None,          # null -> ./.chaosbench/nvme/<run_id>/<node>
        "keep_last": 3,
        "trusted_source": False,
        "save_on_stop": ["memory"],   # on SIGTERM, finish the step and save it to these tiers (docs/gray-failures.md)
        "stop_save_timeout_s": 5.0,   # ... or exit without it after this long; keep it below the preemption grace
        "replica_digests": True,      # compare replicas' parameter digests at save steps; roll back on a mismatch
        "s3": {
            "enabled": False,
            "interval": 50,
            "endpoint_url": None,
            "bucket": "chaosbench",
            "prefix": "checkpoints",
            "region": "us-east-1",
            "max_retries": 5,
            "keep_last": 0,            # 0 keeps every uploaded checkpoint
            "multipart_chunk_mb": 8,
            "retry_backoff_s": 1.0,
        },
    },
    "data": {
        "files": ["trainer/data/corpus/tiny_corpus.jsonl"],
        "text_key": "text",
        "index_path": "trainer/data/corpus/tiny_corpus.idx",
    },
}

# (section path, field) -> (kind, constraint); kinds: int, float, bool, str, list
_POS_INT = ("int", 1)
_NONNEG_INT = ("int", 0)
_POS_FLOAT = ("float", 0.0)
_SCHEMA: dict[str, dict[str, tuple]] = {
    "training": {
        "max_steps": _POS_INT, "seed": ("int", None), "lr": _POS_FLOAT,
        "per_worker_batch_size": _POS_INT, "seq_len": _POS_INT, "log_every": _POS_INT,
        "step_sleep_s": ("float>=", 0.0), "model": ("section", None),
    },
    "training.model": {
        "d_model": _POS_INT, "n_layers": _POS_INT, "n_heads": _POS_INT,
        "vocab_size": _POS_INT, "max_seq_len": _POS_INT,
    },
    "scaling": {"strategy": ("choice", STRATEGIES), "target_global_batch_size": ("opt_int", 1)},
    "elastic": {
        "min_nodes": _POS_INT, "max_nodes": _POS_INT, "health_check_interval_steps": _POS_INT,
        "health_check_interval_s": _POS_FLOAT, "health_check_timeout_s": _POS_FLOAT, "pg_timeout_s": _POS_FLOAT,
    },
    "checkpoint": {
        "memory_snapshot_interval": _NONNEG_INT, "max_snapshots": _POS_INT, "max_memory_mb": _POS_FLOAT,
        "memory_dir": ("opt_str", None), "checkpoint_interval": _NONNEG_INT, "nvme_dir": ("opt_str", None),
        "keep_last": _POS_INT, "trusted_source": ("bool", None), "s3": ("section", None),
        "save_on_stop": ("subset", ("memory", "nvme")), "stop_save_timeout_s": _POS_FLOAT,
        "replica_digests": ("bool", None),
    },
    "checkpoint.s3": {
        "enabled": ("bool", None), "interval": _POS_INT, "endpoint_url": ("opt_str", None),
        "bucket": ("opt_str", None), "prefix": ("str", None), "region": ("str", None),
        "max_retries": _NONNEG_INT, "keep_last": _NONNEG_INT, "multipart_chunk_mb": _POS_INT,
        "retry_backoff_s": ("float>=", 0.0),
    },
    "data": {"files": ("list", None), "text_key": ("str", None), "index_path": ("str", None)},
}


@dataclasses.dataclass
class ValidationResult:
    valid: bool
    errors: list[str]
    warnings: list[str]
    issues: list[ConfigurationError] = dataclasses.field(default_factory=list)  # structured errors


def _get(cfg: dict, path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _check_value(section: str, field: str, kind: str, arg: Any, value: Any) -> str | None:
    where = f"{section}.{field}"
    isint = isinstance(value, int) and not isinstance(value, bool)
    isnum = isint or isinstance(value, float)
    if kind == "int":
        if not isint:
            return f"{where} must be an integer, got {value!r}"
        if arg is not None and value < arg:
            return f"{where} must be >= {arg}, got {value}"
    elif kind == "opt_int":
        if value is not None and (not isint or value < arg):
            return f"{where} must be null or an integer >= {arg}, got {value!r}"
    elif kind == "float":
        if not isnum or value <= arg:
            return f"{where} must be a number > {arg}, got {value!r}"
    elif kind == "float>=":
        if not isnum or value < arg:
            return f"{where} must be a number >= {arg}, got {value!r}"
    elif kind == "bool":
        if not isinstance(value, bool):
            return f"{where} must be true or false, got {value!r}"
    elif kind == "str":
        if not isinstance(value, str) or not value:
            return f"{where} must be a non-empty string, got {value!r}"
    elif kind == "opt_str":
        if value is not None and not isinstance(value, str):
            return f"{where} must be a string or null, got {value!r}"
    elif kind == "list":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            return f"{where} must be a non-empty list of file paths, got {value!r}"
    elif kind == "subset":
        if not isinstance(value, list) or any(v not in arg for v in value):
            return f"{where} must be a list of {', '.join(arg)} (or []), got {value!r}"
    elif kind == "choice":
        if value not in arg:
            return f"{where} is {value!r}; valid options: {', '.join(arg)}"
    elif kind == "section":
        if not isinstance(value, dict):
            return f"{where} must be a mapping (section), got {value!r}"
    return None


def validate_config(cfg: dict) -> ValidationResult:
    """Check a *merged* config (see `merge_defaults`) and report every error and warning."""
    issues: list[ConfigurationError] = []
    warnings: list[str] = []

    def err(section: str, field: str | None, msg: str, options: list | None = None) -> None:
        issues.append(ConfigurationError(msg, section=section, field=field, valid_options=options))

    if not isinstance(cfg, dict):
        err("", None, f"config must be a mapping of sections, got {type(cfg).__name__}")
        return ValidationResult(False, [str(i) for i in issues], warnings, issues)
    top = sorted(k for k in _SCHEMA if "." not in k)
    for key in cfg:
        if key not in top:
            err(str(key), None, f"unknown section {key!r}; valid sections: {', '.join(top)}", top)
    for section, fields in _SCHEMA.items():
        block = _get(cfg, section)
        if not isinstance(block, dict):
            err(section, None, f"section {section!r} is missing or not a mapping")
            continue
        for key in block:
            if key not in fields:
                err(section, str(key), f"unknown field {section}.{key}; valid fields: {', '.join(fields)}",
                    list(fields))
        for field, (kind, arg) in fields.items():
            if field not in block:
                err(section, field, f"{section}.{field} is missing")
                continue
            msg = _check_value(section, field, kind, arg, block[field])
            if msg:
                err(section, field, msg, list(arg) if kind == "choice" else None)
    if issues:  # cross-field rules need well-typed values
        return ValidationResult(False, [str(i) for i in issues], warnings, issues)

    t, m, s, e, c = cfg["training"], cfg["training"]["model"], cfg["scaling"], cfg["elastic"], cfg["checkpoint"]
    if e["max_nodes"] < e["min_nodes"]:
        err("elastic", "max_nodes", f"elastic.max_nodes ({e['max_nodes']}) must be >= elastic.min_nodes ({e['min_nodes']})")
    if m["d_model"] % m["n_heads"]:
        err("training", "model.n_heads", f"training.model.d_model ({m['d_model']}) must be divisible by training.model.n_heads ({m['n_heads']})")
    if m["vocab_size"] < 256:
        err("training", "model.vocab_size", f"training.model.vocab_size must be >= 256 (byte-level tokenizer), got {m['vocab_size']}")
    elif m["vocab_size"] > 256:
        warnings.append(f"training.model.vocab_size is {m['vocab_size']}; the byte-level tokenizer uses only 256 ids")
    if t["seq_len"] > m["max_seq_len"]:
        err("training", "seq_len", f"training.seq_len ({t['seq_len']}) must be <= training.model.max_seq_len ({m['max_seq_len']})")
    if s["strategy"] == "constant_batch":
        if s["target_global_batch_size"] is None:
            err("scaling", "target_global_batch_size",
                "scaling.strategy constant_batch needs scaling.target_global_batch_size (an integer >= 1)")
        elif s["target_global_batch_size"] < e["max_nodes"]:
            err("scaling", "target_global_batch_size",
                f"scaling.target_global_batch_size ({s['target_global_batch_size']}) must be >= elastic.max_nodes ({e['max_nodes']}) so every worker gets a sample")
    elif s["target_global_batch_size"] is not None:
        warnings.append("scaling.target_global_batch_size is ignored by strategy variable_batch")
    if e["health_check_timeout_s"] >= e["pg_timeout_s"]:
        warnings.append(f"elastic.health_check_timeout_s ({e['health_check_timeout_s']}) >= elastic.pg_timeout_s "
                        f"({e['pg_timeout_s']}): a silent peer is detected by the process-group timeout instead")
    if c["s3"]["enabled"] and not c["s3"]["bucket"]:
        err("checkpoint", "s3.bucket", "checkpoint.s3.enabled is true but checkpoint.s3.bucket is not set")
    if c["memory_snapshot_interval"] == 0 and c["checkpoint_interval"] == 0 and not c["s3"]["enabled"]:
        warnings.append("checkpointing is off (all tier intervals are 0): a restart begins from step 0")
    if c["trusted_source"]:
        warnings.append("checkpoint.trusted_source is true: checkpoints are unpickled without restriction")
    return ValidationResult(not issues, [str(i) for i in issues], warnings, issues)


def merge_defaults(user: dict, defaults: dict = DEFAULTS) -> dict:
    """Deep-merge user values over the defaults (unknown keys are kept so validation can name them)."""
    out = copy.deepcopy(defaults)
    for key, value in user.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_defaults(value, out[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_override(cfg: dict, assignment: str) -> None:
    """Apply one `section.field=value` (value parsed as YAML, so `3` is an int and `null` is None)."""
    if "=" not in assignment:
        raise ConfigurationError(f"--set {assignment!r}: expected section.field=value")
    path, raw = assignment.split("=", 1)
    parts = path.strip().split(".")
    if len(parts) < 2 or not all(parts):
        raise ConfigurationError(f"--set {assignment!r}: the key must be section.field (e.g. training.max_steps)")
    node = cfg
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            raise ConfigurationError(f"--set {assignment!r}: {part!r} is not a section", section=parts[0])
        node = node[part]
    try:
        node[parts[-1]] = _yaml(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"--set {assignment!r}: value is not valid YAML: {exc}") from exc


def load_config(path: str | Path, overrides: list[str] = ()) -> tuple[dict, list[str]]:
    """Read a YAML file, merge defaults, apply overrides, validate; raise on the first error.

    Returns the merged config and the validator's warnings."""
    path = Path(path)
    # Errors about the file name it and the problem, never its lines: `--check` answers for whatever
    # path a scenario's trainer.config names, and a scenario can name /etc/shadow.
    try:
        raw = _yaml(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigurationError(f"config file {path} not found") from None
    except OSError as exc:
        raise ConfigurationError(f"config file {path} cannot be read ({exc.strerror}); give a readable "
                                 "reference-trainer config (e.g. trainer/configs/tiny.yaml)") from None
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"config file {path} is not UTF-8 text (byte offset {exc.start}); "
                                 "save it as UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}" if mark else str(exc)
        raise ConfigurationError(f"config file {path} is not valid YAML ({what})") from None
    if not isinstance(raw, dict):
        raise ConfigurationError(f"config file {path}: top level must be a mapping of sections")
    if raw and not any(key in DEFAULTS for key in raw):
        raise ConfigurationError(f"config file {path} has none of the sections {', '.join(sorted(DEFAULTS))}: it is "
                                 f"not a reference-trainer config; name one (e.g. trainer/configs/tiny.yaml)")
    cfg = merge_defaults(raw)
    for assignment in overrides:
        apply_override(cfg, assignment)
    result = validate_config(cfg)
    if not result.valid:
        first = result.issues[0]
        more = f" (and {len(result.issues) - 1} more: {'; '.join(result.errors[1:])})" if len(result.issues) > 1 else ""
        raise ConfigurationError(f"{path}: {first}{more}", section=first.section, field=first.field,
                                 valid_options=first.valid_options)
    return cfg, result.warnings


def resolve_path(p: str) -> Path:
    """A relative data path is taken from the working directory, else from the project root."""
    path = Path(p)
    if path.is_absolute() or path.exists():
        return path
    root_path = Path(__file__).resolve().parent.parent / path
    return root_path if root_path.exists() else path


def main(argv: list[str] | None = None) -> int:
    """`python -m trainer.config --check CONFIG [--set section.field=value ...]`: the harness's way to
    validate a config with a scenario's overrides without importing the trainer. Prints one JSON object:
    {"valid": true, "config": {...merged...}, "warnings": [...]}, exit 0; or {"valid": false,
    "errors": [{"message", "section", "field", "valid_options"}], "warnings": []}, exit 2."""
    import argparse
    import json
    ap = argparse.ArgumentParser(prog="python -m trainer.config",
                                 description="validate a reference-trainer config (with overrides) and print JSON")
    ap.add_argument("--check", required=True, metavar="CONFIG", help="YAML config file")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="section.field=value",
                    help="override a field (value parsed as YAML); repeatable")
    args = ap.parse_args(argv)
    try:
        cfg, warnings = load_config(args.check, args.overrides)
    except ConfigurationError as e:
        error = {"message": str(e), "section": e.section, "field": e.field, "valid_options": e.valid_options}
        print(json.dumps({"valid": False, "errors": [error], "warnings": []}))
        return 2
    print(json.dumps({"valid": True, "config": cfg, "warnings": warnings}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
