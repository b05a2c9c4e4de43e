"""Tuning the policy with a reward model by reinforcement learning (issue #41, Personalized RewardBench's RL
leg): TRL's GRPO trainer with a LoRA adapter through PEFT. The algorithm is TRL's; this file only hands it
prompts and a reward function, and counts the work.

GRPO (Shao et al. 2024) samples `generations` completions per prompt, scores them with the reward model,
and raises the log-probability of each completion in proportion to its reward's standing within its group
(no value model; with TRL's default β = 0, no reference model either). The reward is the method's R(x, y)
for the adapter's user (`whole_response_rewards`, the score Best-of-N ranks by).

Counted work (persalign.engine.cost) of one tuning, from the completions the reward function sees: each one's
sampling (its prompt's prefill and one decode step per token), its forward and backward through the policy
(3 × a forward over prompt + completion) and the reward model's read of it (a forward of the RM backbone).

    python -m pytest tests/test_rl.py
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field

import torch

from persalign.engine.cost import ModelShape, forward_flops, greedy_work
from persalign.engine.decoding import clean_generation

TRAINING_FACTOR = 3.0  # forward + backward


@dataclass
class Tuning:
    """One adapter: its LoRA weights, the counted FLOPs it took and the mean reward at each step."""

    state: dict
    flops: float = 0.0
    completions: int = 0
    rewards: list = field(default_factory=list)


def lora_config(config):
    from peft import LoraConfig

    return LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules="all-linear",
                      task_type="CAUSAL_LM", lora_dropout=0.0)


def grpo_args(config, max_new_tokens: int, seed: int, device: torch.device, out_dir):
    from trl import GRPOConfig

    completions = config.generations * config.prompts_per_step
    return GRPOConfig(output_dir=str(out_dir), use_cpu=device.type == "cpu", bf16=False, seed=seed, data_seed=seed,
                      num_generations=config.generations, per_device_train_batch_size=completions,
                      max_completion_length=max_new_tokens, max_steps=config.steps,
                      learning_rate=config.learning_rate, temperature=config.temperature, report_to=[],
                      save_strategy="no", logging_steps=1, disable_tqdm=True, dataloader_num_workers=0)


class CountedReward:
    """TRL's reward function: the reward model's R(x, y) of each completion for its user, with its work counted."""

    __name__ = "reward_model"  # TRL names its logged reward columns after the function

    def __init__(self, score, formatter, prompt_ids: dict, shapes: tuple[ModelShape, ModelShape | None],
                 max_new_tokens: int):
        self.score, self.formatter, self.prompt_ids = score, formatter, prompt_ids
        self.policy_shape, self.reward_shape = shapes
        self.max_new_tokens, self.flops, self.completions = max_new_tokens, 0.0, 0

    def __call__(self, prompts, completions, completion_ids, user, **_) -> list[float]:
        tokenizer = self.formatter.tokenizer
        prompt_ids = [self.prompt_ids[p] for p in prompts]
        responses = [self.formatter.response_ids(clean_generation(tokenizer, list(ids))) for ids in completion_ids]
        for prompt, ids, response in zip(prompt_ids, completion_ids, responses):
            self.flops += greedy_work(self.policy_shape, len(prompt), len(ids), self.max_new_tokens).flops
            self.flops += TRAINING_FACTOR * forward_flops(self.policy_shape, len(prompt) + len(ids))
            if self.reward_shape is not None:
                self.flops += forward_flops(self.reward_shape, len(prompt) + len(response))
        self.completions += len(responses)
        return [float(r) for r in self.score(list(user), prompt_ids, responses)]


def tune(policy_lm, reward: CountedReward, users: list[str], config, seed: int, out_dir) -> Tuning:
    """A LoRA adapter on a copy of the policy (the shared policy is never touched), tuned by GRPO on the
    prompts of `reward.prompt_ids` (text -> ids), each paired with its user."""
    from datasets import Dataset
    from peft import get_peft_model_state_dict
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    with warnings.catch_warnings():  # transformers' deprecation notices about TRL's own calls: not the user's
        warnings.simplefilter("ignore", FutureWarning)
        trainer = GRPOTrainer(model=copy.deepcopy(policy_lm.model), reward_funcs=reward,
                              args=grpo_args(config, reward.max_new_tokens, seed, policy_lm.device, out_dir),
                              train_dataset=Dataset.from_dict({"prompt": list(reward.prompt_ids), "user": users}),
                              processing_class=policy_lm.tokenizer, peft_config=lora_config(config))
        trainer.remove_callback(PrinterCallback)  # its per-step dicts would flood the run's log
        trainer.train()
    state = {k: v.detach().to("cpu").clone() for k, v in get_peft_model_state_dict(trainer.model).items()}
    rewards = [float(h["reward"]) for h in trainer.state.log_history if "reward" in h]
    return Tuning(state, reward.flops, reward.completions, rewards)


def adapter_shapes(policy_lm, config) -> dict[str, tuple]:
    """Name -> shape of every tensor a tuned adapter of this policy and LoRA config holds."""
    from peft import get_peft_model, get_peft_model_state_dict

    model = get_peft_model(copy.deepcopy(policy_lm.model), lora_config(config))
    return {name: tuple(tensor.shape) for name, tensor in get_peft_model_state_dict(model).items()}


def adapter_mismatch(state: dict, expected: dict[str, tuple]) -> str | None:
    """Why a stored adapter is not one of this policy's (None: it is): PEFT loads a foreign file without a word."""
    missing = sorted(set(expected) - set(state))
    if missing:
        return f"{len(missing)} of its {len(expected)} LoRA tensors missing (first: {missing[0]})"
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        return f"tensors that are no LoRA weight of this policy (first: {unexpected[0]})"
    wrong = next((name for name, shape in expected.items() if tuple(state[name].shape) != shape), None)
    return None if wrong is None else f"{wrong} has shape {tuple(state[wrong].shape)}, not {expected[wrong]}"


def tuned_model(policy_lm, state: dict, config):
    """The policy with a tuned adapter merged in: a plain model of the policy's shape (decoded like it)."""
    from peft import get_peft_model, set_peft_model_state_dict

    model = get_peft_model(copy.deepcopy(policy_lm.model), lora_config(config))
    set_peft_model_state_dict(model, state)
    return model.merge_and_unload().eval()
