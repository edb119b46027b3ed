"""A small byte-level BPE tokenizer with Qwen's special tokens and a minimal Qwen-style chat template."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]

# Qwen2's pre-tokenizer pattern: \p{N} matches one character, so every digit is its own token and
# numbers are spelled digit by digit (a tiny model learns arithmetic far better that way).
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen's layout without the tool-calling and thinking branches. `enable_thinking` and other extra
# kwargs are accepted (Jinja ignores unused variables), so code written for Qwen3 works unchanged.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_tokenizer(texts: Iterable[str], out_dir: str | Path, vocab_size: int = 2048):
    """Train on `texts`, save a PreTrainedTokenizerFast to `out_dir`, and return it."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,  # ids 0, 1, 2
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable, whatever the corpus
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        padding_side="left",  # generation batches are left-padded
        model_max_length=512,
    )
    fast.save_pretrained(str(out_dir))
    return fast


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def reuse_tokenizer(src_dir: str | Path, out_dir: str | Path):
    """An earlier build's tokenizer, its files copied byte for byte to `out_dir`, and loaded from there (a
    build that keeps its merges; re-saving it would add keys of this transformers version to its config)."""
    missing = [f for f in TOKENIZER_FILES if not (Path(src_dir) / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{src_dir} has no {', '.join(missing)}; pass a testbed build directory")
    for f in TOKENIZER_FILES:
        shutil.copyfile(Path(src_dir) / f, Path(out_dir) / f)
    return AutoTokenizer.from_pretrained(str(out_dir))
