"""A tiny random Llama and a byte-level tokenizer, built entirely in code.

Tests and CI use it: no files, no network, deterministic under a seed. The
tokenizer has a chat template so the chat-prompt path is exercised too.

    python -c "from persalign.models.tiny import tiny_llama; print(tiny_llama()[0])"
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + '</s>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def byte_tokenizer(chat: bool = True, extra_specials: tuple[str, ...] = ()) -> PreTrainedTokenizerFast:
    """A lossless byte-level tokenizer (256 byte tokens + 5 specials, then `extra_specials`: another vocabulary)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(extra_specials))}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
        additional_special_tokens=["<|user|>", "<|assistant|>"],
    )
    if chat:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_llama(seed: int = 0, hidden_size: int = 64, layers: int = 2, chat: bool = True,
               extra_specials: tuple[str, ...] = (), padded_rows: int = 0):
    """(model, tokenizer): a 2-layer random Llama over the byte tokenizer; `padded_rows` extra output rows
    past the tokenizer, as real checkpoints pad theirs (Qwen2.5-7B: 152,064 rows for 151,665 tokens)."""
    tokenizer = byte_tokenizer(chat=chat, extra_specials=extra_specials)
    config = LlamaConfig(
        vocab_size=len(tokenizer) + padded_rows, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    torch.random.set_rng_state(generator_state)
    model.eval()
    return model, tokenizer
