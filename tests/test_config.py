import pytest

from persalign.config import DataConfig, RunConfig, from_dict, load_config
from persalign.errors import ConfigError


def test_builtin_demo_config_loads_with_overrides():
    config = load_config("demo", ["seeds=[4, 5]", "generation.batch_size=3", "data.path=/x.jsonl"])
    assert isinstance(config, RunConfig)
    assert config.seeds == [4, 5]
    assert config.generation.batch_size == 3
    assert config.data.path == "/x.jsonl"
    assert [d.name for d in config.decoders] == ["zero_shot", "icl", "icl_rag"]


def test_unknown_keys_are_errors_and_list_valid_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ndata: {dataset: demo, min_item_per_user: 3}\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['min_item_per_user'\].*min_items_per_user"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="unknown key"):
        load_config("demo", ["generation.temperature=0.5"])


def test_types_are_checked():
    with pytest.raises(ConfigError, match="expected int"):
        from_dict(DataConfig, {"min_items_per_user": "twenty"})
    with pytest.raises(ConfigError, match="expected a list"):
        load_config("demo", ["seeds=3"])
    assert from_dict(DataConfig, {"max_items_per_user": None}).max_items_per_user is None


def test_bad_override_syntax_and_missing_config():
    with pytest.raises(ConfigError, match="key=value"):
        load_config("demo", ["seeds"])
    with pytest.raises(ConfigError, match="not found"):
        load_config("no_such_config")
