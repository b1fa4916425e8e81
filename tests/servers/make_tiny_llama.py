"""A tiny LlamaForCausalLM checkpoint with its own tokenizer, made on the spot for vLLM (issue #47): nothing is
downloaded. Random weights (torch seed 0), a byte-level BPE tokenizer trained with `tokenizers` on a few sentences
and padded to VOCAB ids, a chat template, head_dim 64 (vLLM's CPU attention refuses 16).

    python tests/servers/make_tiny_llama.py DIR

Its vocabulary shares nothing with the reference's tiny GGUF (byte tokens and ' t<id>' pieces): the pack must learn
prompts and stop strings from the server. Run with the interpreter that has torch, transformers and tokenizers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 1024
CONTEXT = 8192  # the pack's longest request: a 4000-token prompt and 400 tokens
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A server that keeps decoding after its client left wastes the slot it holds.",
    "Continuous batching runs many requests at once, one decode step for each.",
    "Stop strings end a reply where they first occur; their text is not sent.",
    "Every prompt is processed in chunks, then the model decodes one token at a time.",
    "Seeds make sampling repeat; temperature zero is greedy.",
    "Numbers like 12, 345 and 6789 appear in text as well as words.",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<pad>"]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(SENTENCES * 4, trainer)
    # a few sentences give fewer merges than VOCAB: pad with tokens that spell words, so every id decodes to text
    filler = [f"w{i}" for i in range(VOCAB - tok.get_vocab_size())]
    tok.add_tokens(filler)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 64
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # logits spread enough that greedy replies vary and rarely meet </s>
        model.lm_head.weight.normal_(0.0, 0.5)
    model.save_pretrained(out, safe_serialization=True)
    (out / "made_by.json").write_text(
        json.dumps({"script": "tests/servers/make_tiny_llama.py", "vocab": VOCAB, "context": CONTEXT}) + "\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_llama.py DIR")
    make(Path(sys.argv[1]))
