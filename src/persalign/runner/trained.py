"""What a cell needs before it can run: a trained reward model or a trained policy-side method.

For each (method, seed): fit on the train users' pairs (held-out pairs for
early stopping), adapt every adaptation user on their support pairs, save the
result in RUN_DIR/models/METHOD/seed-N (safetensors, with train_log.json); a
re-run or another deployment of the same method loads it instead of training
again. Reward backbones are loaded once; frozen backbone features are cached
on disk by a fingerprint of the weights and the token ids.

    persalign run configs/news_category.yaml methods='[{name: lore}]'
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from persalign.core.errors import ConfigError, PersalignError
from persalign.core.files import DamagedFileError, fields, read_json, set_aside, short, write_atomic
from persalign.core.prompts import PromptFormatter, context_length, prompt_budget
from persalign.core.registry import METHODS
from persalign.engine.cost import adaptation_work, head_shape, shape_of
from persalign.models.aliases import default_cache_dir
from persalign.models.loading import load_causal_lm
from persalign.rewards.backbone import RewardBackbone, weights_fingerprint
from persalign.rewards.lora import attach_lora, load_adapter, save_adapter
from persalign.rewards.method import precompute_features, resolve_settings
from persalign.rewards.train import PairData, pair_data
from persalign.runner.store import folder_name

VALIDATION_PAIRS = 64  # policy-side methods: held-out pairs scored after fitting (logged, not used to stop)


@dataclass
class TrainedReward:
    method: object  # RewardMethod, adapted to every adaptation user
    backbone: RewardBackbone
    log: dict = field(default_factory=dict)


@dataclass
class TrainedPolicyMethod:
    method: object  # a policy-side method (P-DPO)
    lm: object  # the policy it trained (with its LoRA adapter in reward.mode=lora)
    log: dict = field(default_factory=dict)


def model_dir(store, method_label: str, seed: int, policy: str | None = None):
    """RUN_DIR/models/LABEL/seed-N, or RUN_DIR/models/POLICY/LABEL/seed-N for what is trained on one policy
    (a policy-side method's soft tokens); a label such as '..' still names a folder inside models/."""
    where = store.root / "models" / (folder_name(policy) if policy else "")
    return where / folder_name(method_label) / f"seed-{seed}"


def trained_dir(store, planned):
    """Where a planned cell's trained component is saved. A reward model is trained on the reward backbone
    and shared by every policy (their tokenizers are checked to be one: runner/resolve.check_shared_rewards);
    a policy-side method trains on the policy itself, so each policy gets its own."""
    policy = planned.cell.policy if planned.needs == "policy_method" else None
    return model_dir(store, planned.method_label, planned.cell.seed, policy)


def training_pairs(run, formatter) -> tuple[PairData, PairData, dict[str, PairData]]:
    """(train users' train pairs, their held-out pairs, each adaptation user's support pairs) as token ids."""
    dataset, split = run.dataset, run.split
    train = pair_data(dataset, split.train, formatter, split.train_users)
    val = pair_data(dataset, split.heldout, formatter, split.train_users)
    support = {user: pair_data(dataset, split.support, formatter, [user]) for user in split.adapt_users}
    return train, val, support


def plugin_call(method, stage: str, *args):
    """`method.fit` / `method.adapt`; a plugin's own exception becomes one line naming the plugin (its
    module path) and what it raised; persalign's own methods keep their traceback (a bug of ours)."""
    try:
        return getattr(method, stage)(*args)
    except PersalignError:
        raise
    except Exception as error:
        where = f"{type(method).__module__}:{type(method).__qualname__}"
        if where.startswith("persalign."):
            raise
        raise PersalignError(f"method {where}: its {stage} raised {type(error).__name__}: "
                             f"{str(error).splitlines()[0][:200] if str(error) else ''}; finished cells are kept, "
                             "fix the plugin and re-run the same command to resume") from error


def fit_and_adapt(method, where, train: PairData, val: PairData, support: dict[str, PairData]) -> tuple[object, dict]:
    """Fit on the train users, adapt every adaptation user on its support pairs; (fit log, timing + log info).

    `where` is the reward backbone (reward heads) or the policy itself (policy-side methods).
    """
    start = time.perf_counter()
    fit_log = plugin_call(method, "fit", where, train, val)
    fit_s = time.perf_counter() - start
    head_method = hasattr(where, "trainable")  # a reward backbone; else the policy itself (policy-side methods)
    if head_method:  # the support features first: adaptation's seconds are then its own work, in any order
        precompute_features(method, where, *support.values())
    start = time.perf_counter()
    logs = [plugin_call(method, "adapt", where, user, pairs) for user, pairs in support.items()]
    adapt_s = time.perf_counter() - start
    trained_path = head_shape(method) if head_method else shape_of(where.model)
    features = shape_of(where.lm.model) if head_method and method.personalized else None  # globals adapt nothing
    return fit_log, {"fit_s": fit_s, "adapt_s": adapt_s, "epochs": fit_log.epochs,
                     "adapt_work": adaptation_work(logs, trained_path, features, list(support.values())),
                     "steps": fit_log.steps, "best_val_accuracy": fit_log.best_val_accuracy,
                     "settings": method.settings.__dict__, "history": fit_log.history}


class RewardBackbones:
    """Loads each RM backbone once; frozen + same model as the policy = shared fast path."""

    def __init__(self, config, store):
        self.config, self.store, self._frozen = config, store, {}
        if config.reward.mode not in ("frozen", "lora"):
            raise ConfigError(f"reward.mode must be frozen or lora, got {config.reward.mode!r}")

    def get(self, policy_lm, method_label: str, seed: int, task,
            frozen: bool = False) -> tuple[RewardBackbone, PromptFormatter]:
        """`frozen`: the frozen backbone whatever reward.mode says (a pretrained RM trains nothing on it)."""
        cfg = self.config
        name = cfg.reward.backbone or cfg.policies[0]
        slug = re.sub(r"[^\w.-]+", "_", name)
        if cfg.reward.mode == "frozen" or frozen:
            if name not in self._frozen:
                lm = policy_lm if name == policy_lm.name else load_causal_lm(name, cfg.device, cfg.dtype, cfg.cache_dir)
                key = f"{slug}-{weights_fingerprint(lm.model)}"  # token ids in the keys fix the prompt format
                self._frozen[name] = RewardBackbone(lm, key, default_cache_dir(cfg.cache_dir))
            backbone = self._frozen[name]
        else:
            base = load_causal_lm(name, cfg.device, cfg.dtype, cfg.cache_dir)
            adapter = model_dir(self.store, method_label, seed) / "adapter"
            lm = load_adapter(base, adapter) if adapter.exists() else attach_lora(base, cfg.reward.lora_rank,
                                                                                  cfg.reward.lora_alpha, seed=seed)
            backbone = RewardBackbone(lm, f"{slug}-lora", trainable=not adapter.exists())
        backbone.batch_size = cfg.reward.feature_batch_size
        backbone.token_budget = cfg.generation.token_budget
        return backbone, reward_formatter(cfg, backbone, task)


def reward_formatter(config, backbone: RewardBackbone, task) -> PromptFormatter:
    """How the reward model reads a prompt: its tokenizer, within the prompt budget its context leaves."""
    budget = prompt_budget(config.generation.max_prompt_tokens, config.generation.max_new_tokens,
                           context_length(backbone.lm.model.config))
    return PromptFormatter(backbone.lm.tokenizer, task, budget)


def trained_reward(ctx, backbones: RewardBackbones) -> TrainedReward:
    """The cell's reward model: loaded if saved, else fitted and adapted (then saved)."""
    run, planned = ctx.run, ctx.planned
    method_cls = METHODS.get(planned.method.name)
    backbone, formatter = backbones.get(ctx.policy.lm, planned.method_label, ctx.seed, run.dataset.task,
                                        frozen=getattr(method_cls, "pretrained", False))
    meter, work = ctx.policy.meter, {}
    meter.watch(backbone.lm.model)
    backbone.meter = meter
    where = trained_dir(run.store, planned)
    saved = _load_saved(method_cls, where)
    if saved is not None:
        trained = TrainedReward(saved[0], backbone, saved[1])
    else:
        settings = resolve_settings(method_cls, planned.method, run.config.reward, ctx.seed)
        method = method_cls(backbone.hidden_size, settings)
        train, val, support = training_pairs(run, formatter)
        start = time.perf_counter()
        with meter.measure(work, "features_flops", with_shared=True):  # the pass fills the shared cache
            precompute_features(method, backbone, train, val)
        features_s = time.perf_counter() - start
        with meter.measure(work, "training_flops", with_shared=True):  # fit, adaptation, support features
            fit_log, timing = fit_and_adapt(method, backbone, train, val, support)
        info = {"features_s": features_s, "init": getattr(method, "init_note", None), **timing, **work}
        if backbone.trainable:  # the adapter before head.json, which marks the model complete
            save_adapter(backbone.lm, where / "adapter")
            backbone.trainable = False
        _save(method, info, where)
        run.log(f"trained {planned.method_label} seed {ctx.seed}: {fit_log.epochs} epochs, val acc "
                f"{fit_log.best_val_accuracy:.2f}, fit {info['fit_s']:.1f}s, adapt {info['adapt_s']:.1f}s")
        trained = TrainedReward(method.eval(), backbone, info)
    if not getattr(trained.method, "text_level", False):  # a head ARGS reads on the policy's states every step
        trained.method.to(backbone.lm.device)  # (text-level RMs read text, on the device they were loaded on)
    return trained


def _load_saved(method_cls, where) -> tuple[object, dict] | None:
    """(method, train log) saved in `where`; None if not saved yet. A damaged model folder is set aside
    (kept as NAME.damaged, one warning line) and the model trained again: it is recomputable."""
    if not (where / "head.json").exists():
        return None
    try:
        log = read_json(where / "train_log.json", fields({}))
        return method_cls.load(where), log
    except (DamagedFileError, OSError, ValueError, KeyError, TypeError, RuntimeError) as error:
        problem = error.problem if isinstance(error, DamagedFileError) else f"{type(error).__name__}: {short(error)}"
        set_aside(where, problem, "the model is trained again")
        return None


def _save(method, info: dict, where) -> None:
    where.mkdir(parents=True, exist_ok=True)  # the log first: head.json marks the model complete
    write_atomic(where / "train_log.json", json.dumps(info, indent=2))
    method.save(where)


def _policy_model(config, policy_lm, where, seed: int):
    """The policy the method trains: the frozen policy itself, or a fresh copy carrying a LoRA adapter."""
    if config.reward.mode == "frozen":
        return policy_lm
    base = load_causal_lm(policy_lm.name, config.device, config.dtype, config.cache_dir)
    adapter = where / "adapter"
    if adapter.exists():
        return load_adapter(base, adapter)
    return attach_lora(base, config.reward.lora_rank, config.reward.lora_alpha, seed=seed)


def trained_policy_method(ctx) -> TrainedPolicyMethod:
    """The cell's policy-side method (P-DPO): loaded if saved, else fitted on the policy and adapted."""
    run, planned = ctx.run, ctx.planned
    where = trained_dir(run.store, planned)
    method_cls = METHODS.get(planned.method.name)
    saved = _load_saved(method_cls, where)
    lm = _policy_model(run.config, ctx.policy.lm, where, ctx.seed)
    ctx.policy.meter.watch(lm.model)
    if saved is not None:
        return TrainedPolicyMethod(saved[0], lm, saved[1])
    settings = resolve_settings(method_cls, planned.method, run.config.reward, ctx.seed)
    method = method_cls(lm.model.config.hidden_size, settings)
    train, val, support = training_pairs(run, ctx.policy.formatter)
    val = val.subset(list(range(0, len(val), max(1, len(val) // VALIDATION_PAIRS)))[:VALIDATION_PAIRS])
    work: dict = {}
    with ctx.policy.meter.measure(work, "training_flops"):
        fit_log, info = fit_and_adapt(method, lm, train, val, support)
    info.update(work)
    if run.config.reward.mode == "lora":  # the adapter before head.json, which marks the model complete
        save_adapter(lm, where / "adapter")
    _save(method, info, where)
    run.log(f"trained {planned.method_label} seed {ctx.seed}: {fit_log.steps} steps, val acc "
            f"{fit_log.best_val_accuracy:.2f}, fit {info['fit_s']:.1f}s, adapt {info['adapt_s']:.1f}s")
    return TrainedPolicyMethod(method.eval(), lm, info)
