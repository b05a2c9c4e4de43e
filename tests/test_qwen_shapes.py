"""The paper's scales built in code (issue #40 point 3): Qwen2.5-shaped configs, tokenizer ids, no weights for checks.

The full dry runs (every stage at 0.5B and 1.5B, per-stage memory at 3B and 7B) are benchmarks
(benchmarks/bench_scales.py, docs/scale-out.md); these checks run in seconds on meta tensors.
"""

import pytest
import torch

from persalign.core.registry import MODELS
from persalign.models.checks import model_limits, policy_config, policy_tokenizer
from persalign.models.qwen_shapes import qwen_config, qwen_tokenizer

# parameter counts of the published checkpoints (Hugging Face model cards: 0.49B, 1.54B, 3.09B, 7.61B)
PUBLISHED = {"0.5b": 0.494e9, "1.5b": 1.544e9, "3b": 3.086e9, "7b": 7.616e9}


@pytest.mark.parametrize("size", list(PUBLISHED))
def test_each_shape_has_the_published_parameter_count(size):
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(qwen_config(size))
    count = sum(p.numel() for p in model.parameters())
    assert abs(count / PUBLISHED[size] - 1) < 0.005, count


def test_the_tokenizer_has_qwens_special_ids_chat_template_and_decodes_every_id():
    tokenizer = qwen_tokenizer()
    ids = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    assert ids == [151643, 151644, 151645] and tokenizer.eos_token_id == 151645
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Héllo"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\nHéllo<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(tokenizer("Héllo, wörld")["input_ids"]) == "Héllo, wörld"
    generator = torch.Generator().manual_seed(0)
    for token in torch.randint(0, 151665, (200,), generator=generator).tolist():
        assert isinstance(tokenizer.decode([token]), str)


def test_checks_and_plans_read_a_scale_without_building_it(monkeypatch):
    """Before: the config checks built the whole model for its vocabulary size (7B: minutes, 15 GiB)."""
    from persalign.models import qwen_shapes

    monkeypatch.setattr(qwen_shapes, "qwen_random", lambda *a: (_ for _ in ()).throw(AssertionError("built")))
    assert "qwen2.5-7b-random" in MODELS
    config = policy_config("qwen2.5-7b-random", None)
    assert (config.hidden_size, config.num_key_value_heads, config.tie_word_embeddings) == (3584, 4, False)
    assert model_limits("qwen2.5-7b-random", None)[0] == 152064
    assert policy_tokenizer("qwen2.5-7b-random", None).pad_token_id == 151643
