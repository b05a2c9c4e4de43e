import pytest

from persalign.core.config import DataConfig, RunConfig, load_config
from persalign.core.errors import ConfigError
from persalign.core.typed_yaml import from_dict


def test_builtin_demo_config_loads_with_overrides():
    config = load_config("demo-baselines", ["seeds=[4, 5]", "generation.batch_size=3", "data.path=/x.jsonl"])
    assert isinstance(config, RunConfig)
    assert config.seeds == [4, 5]
    assert config.generation.batch_size == 3
    assert config.data.path == "/x.jsonl"
    assert [d.name for d in config.decoders] == ["zero_shot", "icl", "icl_rag"]


def test_the_builtin_demo_deploys_global_and_personalized_reward_models_with_args_and_best_of_n():
    """Issue #18: `make demo` shows the whole chain: baselines, two global and two personalized RMs."""
    from persalign.runner.plan import plan

    config = load_config("demo")
    assert [d.name for d in config.decoders] == ["zero_shot", "icl", "icl_rag"]
    assert {"global_rm", "global_rm_v2"} <= {m.name for m in config.methods} and len(config.methods) >= 4
    assert config.args.enabled and config.best_of_n.enabled
    deployments = {p.decoder for p in plan(config)}
    assert {"args", "best_of_n"} <= deployments


def test_unknown_keys_are_errors_and_list_valid_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ndata: {dataset: demo, min_item_per_user: 3}\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['min_item_per_user'\].*min_items_per_user"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="unknown key"):
        load_config("demo-baselines", ["generation.temperature=0.5"])


def test_types_are_checked():
    with pytest.raises(ConfigError, match="expected int"):
        from_dict(DataConfig, {"min_items_per_user": "twenty"})
    with pytest.raises(ConfigError, match="expected a list"):
        load_config("demo-baselines", ["seeds=3"])
    assert from_dict(DataConfig, {"max_items_per_user": None}).max_items_per_user is None


def test_bad_override_syntax_and_missing_config():
    with pytest.raises(ConfigError, match="key=value"):
        load_config("demo-baselines", ["seeds"])
    with pytest.raises(ConfigError, match="not found"):
        load_config("no_such_config")


def test_registry_discovers_modules_and_reports_the_real_import_error(tmp_path, monkeypatch):
    import pytest

    from persalign.core.registry import Registry

    for name, modules in {"goodpkg": {"one_method": "from goodpkg import REG\nREG.register('m')(42)\n"},
                          "brokenpkg": {"bad": "import not_a_real_module_xyz\n"}}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"from persalign.core.registry import Registry\nREG = Registry('thing', '{name}', 'persalign.things')\n")
        for module, text in modules.items():
            (tmp_path / name / f"{module}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    import goodpkg

    assert goodpkg.REG.get("m") == 42  # found by walking the package: no list of modules to edit
    broken = Registry("thing", "brokenpkg", "persalign.things")
    for _ in range(2):  # not marked loaded after a failure: the real error again, never "unknown thing"
        with pytest.raises(ImportError, match="importing brokenpkg.bad failed: No module named 'not_a_real_module_xyz'"):
            broken.get("x")


def test_building_a_method_leaves_the_global_rng_alone():
    import torch

    from persalign.core.registry import METHODS
    from tests.method_settings import plain_settings

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    METHODS.get("lore")(16, plain_settings("lore", seed=7))
    assert torch.equal(torch.rand(3), expected)


def test_inline_task_template_from_a_config_or_the_command_line():
    from pathlib import Path

    import pytest

    from persalign.core.config import TaskSpec, load_config
    from persalign.core.errors import ConfigError
    from persalign.core.prompts import PromptFormatter
    from persalign.models.tiny import byte_tokenizer

    my_writing = str(Path(__file__).resolve().parents[1] / "configs" / "my_writing.yaml")
    # issue #43 (1): the own-data example carried a commit-message task that a product-Q&A run used silently
    with pytest.raises(ConfigError, match=r"data\.task: your own data \(completions_jsonl\) needs the task its "
                                          r"prompts ask for; set a named one .*e\.g\. data\.task=chat"):
        load_config(my_writing)
    with pytest.raises(ConfigError, match=r"data\.task: your own data \(preferences_jsonl\)"):
        load_config("demo-baselines", ["data.dataset=preferences_jsonl", "data.path=pairs.jsonl"])
    config = load_config(my_writing, ["data.task={instruction: Answer the product question., input_label: Question, "
                                      "output_label: Answer}"])
    assert config.data.task == TaskSpec("Answer the product question.", "Question", "Answer")
    override = load_config("demo-baselines", ["data.task={instruction: Write a title for this review., input_label: Review, "
                                    "output_label: Title}"])
    formatter = PromptFormatter(byte_tokenizer(chat=False), override.data.task)
    text = formatter.tokenizer.decode(formatter.prompt_ids("Great kettle, boils fast."))
    assert text.startswith("Write a title for this review.") and text.endswith("Review: Great kettle, boils fast.\nTitle:")
    with pytest.raises(ConfigError, match=r"data\.task\.output_label: '' is not allowed \(an inline task needs"):
        load_config("demo-baselines", ["data.task={instruction: Write., input_label: Review}"])
    with pytest.raises(ConfigError, match=r"data\.task\.input_label: ' ' is not allowed"):
        load_config("demo-baselines", ["data.task={instruction: Write., input_label: ' ', output_label: Title}"])
