import copy

import pytest

from trainer.config import DEFAULTS, apply_override, load_config, merge_defaults, validate_config
from trainer.errors import ConfigurationError


def cfg_with(**changes):
    cfg = copy.deepcopy(DEFAULTS)
    for path, value in changes.items():
        apply_override(cfg, f"{path.replace('__', '.')}={value}")
    return cfg


def test_defaults_and_shipped_configs_are_valid():
    assert validate_config(copy.deepcopy(DEFAULTS)).valid
    for name in ("tiny", "medium_50mb"):
        cfg, warnings = load_config(f"trainer/configs/{name}.yaml")
        assert cfg["scaling"]["strategy"] == "variable_batch"
        assert warnings == []


@pytest.mark.parametrize("changes, needle", [
    ({"elastic__min_nodes": 0}, "elastic.min_nodes must be >= 1"),
    ({"elastic__min_nodes": 3, "elastic__max_nodes": 2}, "elastic.max_nodes (2) must be >= elastic.min_nodes (3)"),
    ({"elastic__health_check_interval_steps": 0}, "elastic.health_check_interval_steps must be >= 1"),
    ({"elastic__health_check_timeout_s": -1}, "elastic.health_check_timeout_s must be a number > 0"),
    ({"checkpoint__checkpoint_interval": -5}, "checkpoint.checkpoint_interval must be >= 0"),
    ({"checkpoint__s3__interval": 0}, "checkpoint.s3.interval must be >= 1"),
    ({"training__max_steps": "ten"}, "training.max_steps must be an integer"),
    ({"scaling__strategy": "elastic_batch"}, "valid options: variable_batch, constant_batch"),
    ({"scaling__strategy": "constant_batch"}, "constant_batch needs scaling.target_global_batch_size"),
    ({"training__model__n_heads": 5}, "must be divisible by training.model.n_heads"),
    ({"training__seq_len": 512}, "training.seq_len (512) must be <= training.model.max_seq_len"),
    ({"checkpoint__save_on_stop": ["s3"]}, "checkpoint.save_on_stop must be a list of memory, nvme (or [])"),
    ({"checkpoint__stop_save_timeout_s": 0}, "checkpoint.stop_save_timeout_s must be a number > 0"),
])
def test_invalid_values_are_named(changes, needle):
    result = validate_config(cfg_with(**changes))
    assert not result.valid
    assert any(needle in e for e in result.errors), result.errors


def test_no_stop_tiers_is_valid():
    assert validate_config(cfg_with(checkpoint__save_on_stop=[])).valid


def test_unknown_strategy_error_carries_section_field_and_options():
    result = validate_config(cfg_with(scaling__strategy="bogus"))
    issue = result.issues[0]
    assert (issue.section, issue.field) == ("scaling", "strategy")
    assert issue.valid_options == ["variable_batch", "constant_batch"]


def test_unknown_section_and_field_are_errors_listing_valid_names():
    cfg = merge_defaults({"trainign": {}, "elastic": {"min_node": 1}})
    errors = validate_config(cfg).errors
    assert any("unknown section 'trainign'" in e and "training" in e for e in errors)
    assert any("unknown field elastic.min_node" in e and "min_nodes" in e for e in errors)


def test_all_errors_reported_at_once_and_warnings_separate():
    result = validate_config(cfg_with(elastic__min_nodes=0, training__lr=0))
    assert len(result.errors) == 2
    result = validate_config(cfg_with(scaling__target_global_batch_size=64))
    assert result.valid and any("ignored by strategy variable_batch" in w for w in result.warnings)


def test_constant_batch_with_target_is_valid():
    assert validate_config(cfg_with(scaling__strategy="constant_batch", scaling__target_global_batch_size=16)).valid


def test_load_config_raises_with_file_section_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("elastic: {min_nodes: 2, max_nodes: 1}\n")
    with pytest.raises(ConfigurationError) as exc:
        load_config(bad)
    assert str(bad) in str(exc.value) and exc.value.section == "elastic" and exc.value.field == "max_nodes"


def test_overrides_are_typed_by_yaml(tmp_path):
    cfg, _ = load_config("trainer/configs/tiny.yaml", ["training.max_steps=7", "checkpoint.nvme_dir=/nvme",
                                                       "checkpoint.s3.enabled=true", "training.lr=1e-3",
                                                       "checkpoint.memory_dir=null"])
    assert cfg["training"]["max_steps"] == 7 and cfg["checkpoint"]["nvme_dir"] == "/nvme"
    assert cfg["checkpoint"]["s3"]["enabled"] is True and cfg["checkpoint"]["memory_dir"] is None
    assert cfg["training"]["lr"] == pytest.approx(1e-3)


@pytest.mark.parametrize("assignment", ["training.max_steps", "max_steps=3", "training.max_steps.x=1"])
def test_bad_overrides(assignment):
    with pytest.raises(ConfigurationError):
        load_config("trainer/configs/tiny.yaml", [assignment])


def test_missing_or_malformed_file(tmp_path):
    with pytest.raises(ConfigurationError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "x.yaml").write_text("training: [1, 2\n")
    with pytest.raises(ConfigurationError, match="not valid YAML"):
        load_config(tmp_path / "x.yaml")
