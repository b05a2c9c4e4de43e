"""Scoring and feature passes batched by a token budget sized to the GPU (issue #76, CPU side).

On CPU the passes keep the measured budget and the config's row cap (the CPU's numbers do not move); on CUDA the
budget is what half of the free memory holds and there is no row cap. The CUDA branch is checked here with the
free memory stubbed; the GPU check (benchmarks/gpu_check.py) runs it for real.

    pytest tests/test_pass_limits.py
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen2Config

from persalign.engine.batching import DEFAULT_BUDGET, bytes_per_token, pass_limits

GIB = 1 << 30
QWEN_7B = Qwen2Config(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                      num_key_value_heads=4, vocab_size=152064)


def fake_cuda_lm(config, dtype=torch.bfloat16):
    return SimpleNamespace(device=torch.device("cuda", 0), model=SimpleNamespace(config=config, dtype=dtype))


def test_the_cpu_keeps_its_measured_budget_and_the_row_cap(tiny_lm):
    assert pass_limits(tiny_lm, 16, logits=True) == (DEFAULT_BUDGET["cpu"], 16)
    assert pass_limits(tiny_lm, 8, logits=False) == (DEFAULT_BUDGET["cpu"], 8)


def test_on_cuda_the_budget_is_what_half_the_free_memory_holds_and_rows_are_not_capped(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100 * GIB, 140 * GIB))
    lm = fake_cuda_lm(QWEN_7B)
    features, cap = pass_limits(lm, 16, logits=False)
    scoring, _ = pass_limits(lm, 16, logits=True)
    assert cap is None
    # 7B bf16: 2 B × (4·3584 + 2·18944 + 2·28·4·128 KV) = 161,792 B a token; logits add 8 × 152,064
    assert bytes_per_token(QWEN_7B, 2, logits=False) == 2 * (4 * 3584 + 2 * 18944 + 2 * 28 * 4 * 128)
    assert features == int(0.5 * 100 * GIB / bytes_per_token(QWEN_7B, 2, False)) == 331_827
    assert scoring == int(0.5 * 100 * GIB / (bytes_per_token(QWEN_7B, 2, False) + 8 * 152064)) == 38_951
    assert scoring > 16 * 200  # far more than the 16 rows of ~200 tokens the cap allowed


@pytest.mark.parametrize("free, expected", [(1 * (1 << 20), 1024), (10_000 * GIB, 1 << 20)])
def test_the_cuda_budget_stays_between_a_long_row_and_what_one_forward_needs(monkeypatch, free, expected):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, free))
    assert pass_limits(fake_cuda_lm(QWEN_7B), 16, logits=True)[0] == expected


def test_scoring_takes_the_budget_and_cap_the_device_gives(monkeypatch, tiny_lm):
    """With CUDA's limits (no row cap) 40 short pairs take one forward where the CPU's cap of 16 takes three;
    the log-probabilities are the same pairs' either way (rows keep their order)."""
    from persalign.engine import scoring

    prompts = [[5 + i % 7, 9, 11] for i in range(40)]
    responses = [[20 + i % 5, 21] for i in range(40)]
    forwards = []
    handle = tiny_lm.model.get_output_embeddings().register_forward_hook(lambda *_: forwards.append(1))
    try:
        cpu = scoring.response_logprobs(tiny_lm, prompts, responses, batch_size=16)
        cpu_forwards = len(forwards)
        monkeypatch.setattr(scoring, "pass_limits", lambda lm, batch_size, logits: (1 << 20, None))
        wide = scoring.response_logprobs(tiny_lm, prompts, responses, batch_size=16)
    finally:
        handle.remove()
    assert cpu_forwards == 3 and len(forwards) - cpu_forwards == 1
    assert all(a.shape == b.shape and abs(a - b).max() < 1e-4 for a, b in zip(cpu, wide))


def test_the_feature_pass_plans_with_the_device_limits(monkeypatch, tiny_lm, tmp_path):
    from persalign.rewards import backbone as backbone_module

    seen = []
    real = backbone_module.plan_batches
    monkeypatch.setattr(backbone_module, "plan_batches", lambda *a, **k: seen.append(a[1:3]) or real(*a, **k))
    monkeypatch.setattr(backbone_module, "pass_limits", lambda lm, batch_size, logits: (4096, None))
    backbone = backbone_module.RewardBackbone(tiny_lm, "limits-test", None)
    backbone.states([[5, 6, 7]] * 3, [[8, 9], [10], [11, 12, 13]])
    assert seen == [(4096, None)]
