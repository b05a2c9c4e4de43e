"""hf_rm (issue #30, point 3): any sequence-classification reward model, with its own tokenizer, deployed as a
global RM: RM accuracy, ARGS, Best-of-N, policy accuracy with s_RGD, win rate.

The classifier is a tiny randomly initialised Llama classifier saved to a temporary folder with a tokenizer
that is NOT the policy's (a word-level tokenizer built in code), so everything goes through text.
"""

import json

import pytest
import torch

from persalign import cli
from persalign.core.registry import METHODS
from tests.test_runner import TINY


def word_tokenizer():
    """A word-level tokenizer over a small vocabulary (unknown words map to [UNK]); nothing downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
        ["the", "a", "of", "to", "and", "in", "is", "for", "on", "headline", "write", "user", "assistant"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]")


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tokenizer = word_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, num_labels=1,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config)
    folder = tmp_path_factory.mktemp("rm") / "tiny-classifier"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_it_reads_text_with_its_own_tokenizer(classifier_dir, tiny_lm):
    from persalign.rewards.hf_rm import HFRewardSettings

    method = METHODS.get("hf_rm")(0, HFRewardSettings(model=str(classifier_dir)))
    method.bind(tiny_lm)
    assert method.tokenizer.get_vocab() != tiny_lm.tokenizer.get_vocab()
    scores = method.score_texts([("write the headline", "a cat"), ("write the headline", "the dog of a")])
    assert scores.shape == (2,) and torch.isfinite(scores).all() and scores[0] != scores[1]
    prompt = tiny_lm.tokenizer.encode("write the headline", add_special_tokens=False)
    response = tiny_lm.tokenizer.encode(" a cat", add_special_tokens=False)
    sequence, steps = method.reward_sums(type("B", (), {"lm": tiny_lm})(), ["u"], [prompt], [response])
    prefix = method.score_texts([(method._text(prompt), method._text(response[: t + 1]))
                                 for t in range(len(response))])
    assert sequence[0] == pytest.approx(float(prefix[-1])) and steps[0] == pytest.approx(float(prefix.sum()))


def test_args_and_best_of_n_run_on_it_end_to_end(classifier_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["run", "demo-baselines", "-o", str(run_dir), f"methods=[{{name: hf_rm, model: '{classifier_dir}'}}]",
            "decoders=[{name: zero_shot}]", "seeds=[0]", "args.selection=fixed", "args.fixed_lambda=5",
            "args.top_k=4", "best_of_n.enabled=true", "best_of_n.ns=[1,2]"] + \
        [a for a in TINY if not a.startswith("seeds")]
    assert cli.main(argv) == 0
    cells = {m["decoder"]: m for m in map(lambda p: json.loads(p.read_text()), run_dir.glob("cells/*/*/*/metrics.json"))}
    args, bon, zero = cells["HF RM"], cells["HF RM (Best-of-N)"], cells["Zero-Shot"]
    for cell in (args, bon):
        assert 0 <= cell["rm_accuracy"] <= 100 and cell["rouge1"] is not None
    assert 0 <= args["policy_accuracy"] <= 100 and 0 <= args["win_rate"] <= 100
    assert args["settings"]["lambda"] == 5 and args["settings"]["training"]["settings"]["model"] == str(classifier_dir)
    # the classifier's reading is counted: k texts per ARGS step through the classifier's own shape
    assert args["counted_work"]["reward_tokens"] > 0
    assert args["counted_work"]["flops_per_output"] > zero["counted_work"]["flops_per_output"]
    rows = [json.loads(line) for line in next(run_dir.glob("cells/*/HF_RM/seed-0/rows.jsonl")).read_text().splitlines()]
    zero_rows = {r["id"]: r for p in run_dir.glob("cells/*/Zero-Shot/*/rows.jsonl")
                 for r in map(json.loads, p.read_text().splitlines())}
    assert any(r["generation"] != zero_rows[r["id"]]["generation"] for r in rows)  # λ = 5 moved some outputs
    assert "HF RM" in capsys.readouterr().out


def test_a_classifier_with_several_labels_or_no_model_is_refused(tmp_path, capsys, classifier_dir):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(classifier_dir, num_labels=3,
                                                               ignore_mismatched_sizes=True)
    model.save_pretrained(tmp_path / "three")
    word_tokenizer().save_pretrained(tmp_path / "three")
    capsys.readouterr()  # the set-up's own progress bars
    for method, message in [(f"{{name: hf_rm, model: '{tmp_path / 'three'}'}}", "a reward model has one output, "
                                                                                 "this classifier has 3 labels"),
                            ("{name: hf_rm}", "methods[0]: `model:` is required (hub id or local folder")]:
        code = cli.main(["run", "demo-baselines", "-o", str(tmp_path / "run"), f"methods=[{method}]"] + TINY)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], err


def test_in_lora_mode_it_neither_builds_nor_saves_a_lora_backbone(classifier_dir, tmp_path):
    """A pretrained RM trains nothing: reward.mode=lora must not copy the policy into a LoRA backbone for it."""
    from persalign.core.config import load_config
    from persalign.runner.run import run

    overrides = [f"methods=[{{name: hf_rm, model: '{classifier_dir}'}}]", "decoders=[{name: zero_shot}]",
                 "seeds=[0]", "args.selection=fixed", "args.top_k=4", "reward.mode=lora"] + \
        [a for a in TINY if not a.startswith("seeds")]
    store = run(load_config("demo-baselines", overrides), tmp_path / "run", log=lambda *_: None)
    assert {m["decoder"] for m in store.all_metrics()} == {"Zero-Shot", "HF RM"}
    assert not list((tmp_path / "run" / "models").glob("*/seed-0/adapter"))


def test_a_cut_input_keeps_the_response_and_ties_from_cutting_are_counted(classifier_dir, tiny_lm):
    """Issue #40: at max_length 64 every ARGS candidate got the same reward: truncation dropped the end (the
    response). Now the beginning goes; a tokenizer that still cuts the end makes ties, and they are counted."""
    from persalign.rewards.hf_rm import HFRewardSettings

    method = METHODS.get("hf_rm")(0, HFRewardSettings(model=str(classifier_dir), max_length=8))
    method.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] + ' ' }}{% endfor %}"  # one text
    method.bind(tiny_lm)
    prompt = tiny_lm.tokenizer.encode("write the headline of the user " * 6, add_special_tokens=False)
    candidates = torch.tensor([[tiny_lm.tokenizer.convert_tokens_to_ids(c) for c in ("a", "b", "c", "d")]])
    rewards, read = method.candidate_rewards([prompt], [[]], candidates)
    assert max(read[0]) == 8 and len(set(rewards[0].tolist())) > 1  # cut, yet the candidates are told apart
    assert method.truncation_ties == 0
    method.tokenizer.truncation_side, method.memo = "right", {}  # the old behaviour
    rewards, _ = method.candidate_rewards([prompt], [[]], candidates)
    assert len(set(rewards[0].tolist())) == 1 and method.truncation_ties == 1


def test_ties_from_cutting_are_counted_from_the_token_ids_whatever_float_noise_each_batch_row_adds(classifier_dir,
                                                                                                   tiny_lm):
    """Issue #74: on an Intel Xeon the four cut-to-one-text candidates scored 0.12179452180862427 three times and
    0.12179452925920486 once (their batch rows), so the tie read 0. Here each row's logit carries its own last-bit
    noise on purpose: the tie is still counted, and the identical inputs get one reward."""
    from persalign.rewards.hf_rm import HFRewardSettings

    method = METHODS.get("hf_rm")(0, HFRewardSettings(model=str(classifier_dir), max_length=8))
    method.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] + ' ' }}{% endfor %}"
    method.tokenizer.truncation_side = "right"  # cutting the end: the four candidates become one text
    method.bind(tiny_lm)
    forward = method.classifier.forward

    def noisy_rows(*args, **kwargs):
        out = forward(*args, **kwargs)
        out.logits = out.logits + torch.arange(len(out.logits), dtype=out.logits.dtype)[:, None] * 1e-7
        return out

    method.classifier.forward = noisy_rows
    prompt = tiny_lm.tokenizer.encode("write the headline of the user " * 6, add_special_tokens=False)
    candidates = torch.tensor([[tiny_lm.tokenizer.convert_tokens_to_ids(c) for c in ("a", "b", "c", "d")]])
    rewards, read = method.candidate_rewards([prompt], [[]], candidates)
    assert max(read[0]) == 8
    assert method.truncation_ties == 1
    assert len(set(rewards[0].tolist())) == 1  # one input, one reward
