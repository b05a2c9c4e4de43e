"""Typed run configuration: a YAML file plus `key=value` overrides.

Unknown keys are errors (with the list of valid keys), values are type-checked,
and the resolved config is saved beside the results so a run can be repeated.

    persalign run configs/news_category.yaml seeds=[0,1] generation.batch_size=8
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from persalign.core.errors import ConfigError
from persalign.core.typed_yaml import UniqueKeyLoader, apply_override, from_dict


@dataclass(frozen=True)
class TaskSpec:
    """Your own task, inline: `data.task: {instruction: ..., input_label: ..., output_label: ...}`."""

    instruction: str = ""
    input_label: str = ""
    output_label: str = ""


@dataclass
class DataConfig:
    """Where the per-user data comes from and how preferences are built (paper §5)."""

    dataset: str = "demo"
    path: str | None = None
    task: str | TaskSpec | None = None  # a named task, or an inline TaskSpec; default: the data set's own
    min_items_per_user: int = 20
    max_items_per_user: int | None = None  # cap very prolific users (newest kept)
    max_users: int | None = None  # per-user writing: keep the first N qualifying users, in data order
    embedder: str = "minilm-l6"  # for hard negatives and ICL-RAG retrieval
    negatives_top_k: int = 10  # Pref-LaMP: sample the rejected output among these
    seed: int = 0


@dataclass
class SplitConfig:
    """Train users vs adaptation users; adaptation users' items: support vs query."""

    adapt_fraction: float = 0.2
    support_fraction: float = 0.5
    heldout_fraction: float = 0.1  # train users' pairs kept for validation / λ choice
    max_query_per_user: int | None = None
    train_top_users: int | None = None  # TL;DR shape: the N users with most pairs train, the rest adapt
    adapt_pairs_per_user: int | None = None  # TL;DR shape: adaptation users need (and keep) this many pairs
    seed: int = 0


@dataclass
class DecoderConfig:
    """One deployment of the policy: zero_shot, icl (random demos) or icl_rag."""

    name: str = "zero_shot"
    shots: int = 0
    label: str | None = None  # row name in reports; defaults per decoder
    draw: str | None = None  # icl: demonstrations drawn "per_user" (one D_k^demo, default) or "per_query"


@dataclass
class GenerationConfig:
    max_new_tokens: int = 32
    batch_size: int = 16  # an upper bound on items per forward; the token budget decides below it
    token_budget: int | None = None  # padded tokens per forward; default per device (persalign.engine.batching)
    max_prompt_tokens: int = 1536  # demos are dropped (never the query) to fit
    cuda_graph: bool = False  # the policy decodes on a captured step (engine/graphed_decode.py): on CUDA a replay
    # per token; elsewhere the same step uncaptured. Off: the eager loop, whose numbers the goldens hold


@dataclass
class MetricsConfig:
    bertscore_model: str = "minilm-l6"
    bertscore_layer: int | None = None  # None: the encoder's last layer (paper: roberta-large, layer 17)
    rouge_stemmer: bool = False  # LaMP's evaluation and HF evaluate's default
    names: list[str] = field(default_factory=lambda: ["rouge", "bertscore"])  # generation metrics


@dataclass
class MethodConfig:
    """One trained method: a registered name or a plugin's module:Class, and its settings beside it
    (`{name: pal, prototypes: 6}`), checked against the method's own Settings dataclass (unset: its
    defaults; `persalign list --method NAME` documents them)."""

    name: str = "global_rm"
    label: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    extra_keys_into: ClassVar[str] = "settings"  # every other key of the mapping is a setting


@dataclass
class RewardConfig:
    """How reward models are built and trained (appendix F.1)."""

    backbone: str | None = None  # default: the first policy (frozen: shared-backbone fast path)
    mode: str = "frozen"  # frozen (features cached, heads trained) | lora (rank 8, alpha 16, rsLoRA)
    batch_size: int = 32
    epochs: int = 200
    patience: int = 20
    adapt_epochs: int | None = None  # None: the method's default (100; PAL 500)
    max_steps: int | None = None  # cap on training steps (LoRA on CPU)
    backbone_lr: float = 5e-5  # lora mode: the adapter's learning rate, for methods whose settings leave it empty
    lora_rank: int = 8  # lora mode (rewards/lora.py, appendix F.1); rsLoRA scales by alpha / √rank
    lora_alpha: int = 16
    feature_batch_size: int = 16  # frozen mode: prompts per backbone forward while caching features


@dataclass
class ArgsConfig:
    """ARGS decoding (Eq. 1) and the choice of λ (appendix F.2)."""

    top_k: int = 10
    lambdas: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.3, 1.0, 3.0, 10.0])
    selection: str = "auto"  # auto | policy_accuracy | harmonic | fixed
    fixed_lambda: float = 1.0
    validation_size: int = 32  # held-out train-user items for the harmonic-mean rule
    enabled: bool = True  # deploy every method with ARGS (false: only Best-of-N cells, if enabled)
    shared_pass: bool = True  # frozen-backbone heads decode as rows of one pass (runner/args_pass.py)
    # A deployed RM on its own backbone decodes with its step captured as a CUDA graph (decoders/args_graph.py):
    # on an H200 3-10x faster at batch 1; floats may differ from the eager loop in bf16 at near-ties. On a CPU
    # the same step runs uncaptured: no faster than the eager loop (it is there to be tested)
    cuda_graph: bool = False


@dataclass
class BestOfNConfig:
    """Best-of-N deployment (Personalized RewardBench): nested N from one seeded sample set per policy × seed."""

    enabled: bool = False
    ns: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    temperature: float = 1.0


@dataclass
class RLConfig:
    """The RL leg (decoders/rl.py): the policy tuned with each reward model by TRL's GRPO, LoRA through PEFT."""

    enabled: bool = False
    steps: int = 8  # optimizer steps per adapter (capped: CPU; the cell's settings say so)
    generations: int = 4  # completions sampled per prompt (GRPO's group)
    prompts_per_step: int = 1  # prompts per optimizer step (each with its `generations` completions)
    learning_rate: float = 1e-4  # of the policy's LoRA adapter (decoders/rl_training.py)
    lora_rank: int = 8  # rank of the policy's adapter (PEFT, all linear layers)
    lora_alpha: int = 16
    temperature: float = 1.0  # of the sampled completions


@dataclass
class JudgeConfig:
    """A pairwise LLM judge of generations (metrics/judge.py): off until `models` names one or more."""

    models: list[str] = field(default_factory=list)  # aliases, hub ids or folders (several: majority vote)
    endpoint: str | None = None  # an OpenAI-compatible base URL: `models` are then names it serves
    context_items: int = 2  # the user's earlier texts shown to the judge where the data has no rubric
    context_chars: int = 300  # each of them cut to this many characters
    max_new_tokens: int = 4  # the answer: A, B or tie
    timeout_s: float = 60.0  # an endpoint's answer is waited for this long, then asked again ...
    retries: int = 2  # ... this many times; then the run stops in one line (finished cells kept)


@dataclass
class RunConfig:
    name: str = "run"
    seeds: list[int] = field(default_factory=lambda: [0])
    data: DataConfig = field(default_factory=DataConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    policies: list[str] = field(default_factory=lambda: ["smollm2-135m-instruct"])
    decoders: list[DecoderConfig] = field(
        default_factory=lambda: [
            DecoderConfig("zero_shot"),
            DecoderConfig("icl", shots=4),
            DecoderConfig("icl_rag", shots=4),
        ]
    )
    methods: list[MethodConfig] = field(default_factory=list)  # reward methods, each deployed with ARGS
    reward: RewardConfig = field(default_factory=RewardConfig)
    args: ArgsConfig = field(default_factory=ArgsConfig)
    best_of_n: BestOfNConfig = field(default_factory=BestOfNConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    device: str = "auto"
    dtype: str = "auto"
    cache_dir: str | None = None  # converted models, embeddings; default ~/.cache/persalign
    threads: int | None = None  # torch threads per process (default 1): numbers depend on it (models/numerics.py)


BUILTIN_CONFIG_DIR = Path(__file__).parents[1] / "configs"


def resolve_config_path(name_or_path: str) -> Path:
    """A config file path, or the name of a built-in config such as `demo`."""
    path = Path(name_or_path)
    try:
        path.exists()
    except OSError as error:  # a name longer than the file system allows
        raise ConfigError(f"config {name_or_path[:60]!r}…: not a file name ({error.strerror})") from None
    if path.is_dir():
        raise ConfigError(f"{path}: a directory, not a config file (give a YAML file or a built-in config name)")
    if path.exists():
        return path
    builtin = BUILTIN_CONFIG_DIR / f"{name_or_path}.yaml"
    if builtin.exists():
        return builtin
    names = sorted(p.stem for p in BUILTIN_CONFIG_DIR.glob("*.yaml"))
    raise ConfigError(f"config {name_or_path!r} not found (not a file; built-in configs: {names})")


def load_config(name_or_path: str, overrides: list[str] = (), cls: type = RunConfig) -> Any:
    path = resolve_config_path(name_or_path)
    try:
        data = yaml.load(path.read_bytes().decode("utf-8"), Loader=UniqueKeyLoader) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    for override in overrides:
        apply_override(data, override)
    config = from_dict(cls, data, where=str(path))
    if cls is RunConfig:
        from persalign.core.config_checks import validate

        validate(config, where=str(path))
    return config
