"""Random-weight models with the exact architecture of Qwen2.5-{0.5B, 1.5B, 3B, 7B}-Instruct, built in code.

The paper's scale axis (Table 1: policies of 0.5B to 7B, one Qwen2.5-0.5B reward
backbone). No weights are needed to check that every stage runs at those
shapes and to measure its memory: a 151,936- (7B: 152,064-) row vocabulary,
grouped-query attention (2 or 4 key-value heads), tied embeddings up to 3B,
rope θ = 10⁶. The numbers are those of each model's published config.json.
The tokenizer is byte-level with Qwen's 151,643 regular ids (bytes first, the
rest placeholders that decode to "<fN>") and its special tokens and chat
template, so every id a random model can emit decodes. Models are built in
bfloat16 (the published dtype): a float32 7B would not fit a 24 GiB machine.

    persalign run configs/scales_dry_run.yaml policies=[qwen2.5-1.5b-random]
"""

from __future__ import annotations

import torch

# hidden, intermediate, layers, attention heads, key-value heads, tied embeddings, vocabulary, max_window_layers
SHAPES = {
    "0.5b": (896, 4864, 24, 14, 2, True, 151936, 21),
    "1.5b": (1536, 8960, 28, 12, 2, True, 151936, 21),
    "3b": (2048, 11008, 36, 16, 2, True, 151936, 70),
    "7b": (3584, 18944, 28, 28, 4, False, 152064, 28),
}
REGULAR_TOKENS = 151643
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"<|extra_{i}|>" for i in range(19)]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def qwen_config(size: str):
    from transformers import Qwen2Config

    hidden, intermediate, layers, heads, kv, tied, vocab, window = SHAPES[size]
    return Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                       num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                       hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
                       tie_word_embeddings=tied, use_sliding_window=False, max_window_layers=window,
                       bos_token_id=151643, eos_token_id=151645, pad_token_id=151643, torch_dtype="bfloat16")


def qwen_tokenizer():
    """Byte-level, Qwen's ids for its regular and special tokens, its chat template; built in seconds."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab.update({f"<f{i}>": i for i in range(len(vocab), REGULAR_TOKENS)})
    vocab.update({tok: REGULAR_TOKENS + i for i, tok in enumerate(SPECIALS)})
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                        additional_special_tokens=SPECIALS[1:2] + SPECIALS[3:])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def qwen_random(size: str, seed: int = 0):
    """(model, tokenizer): random weights in bfloat16, built without a float32 copy."""
    from transformers import Qwen2ForCausalLM

    previous = torch.get_default_dtype()
    state = torch.random.get_rng_state()
    torch.set_default_dtype(torch.bfloat16)
    torch.manual_seed(seed)
    try:
        model = Qwen2ForCausalLM(qwen_config(size))
    finally:
        torch.set_default_dtype(previous)
        torch.random.set_rng_state(state)
    return model.eval(), qwen_tokenizer()
