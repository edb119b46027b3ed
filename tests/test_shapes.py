"""Published Qwen3 shapes (random weights, counted on the meta device) and the real tokenizer."""

from __future__ import annotations

import pytest

from rolecast.policies.shapes import PUBLISHED_PARAMS, count_params, init_random_model, qwen_tokenizer_dir


@pytest.mark.parametrize("shape", sorted(PUBLISHED_PARAMS))
def test_published_shapes_match_published_sizes(shape):
    n = count_params(shape)
    assert abs(n - PUBLISHED_PARAMS[shape]) / PUBLISHED_PARAMS[shape] < 0.05, n


def test_tiny_qwen3_has_the_real_vocabulary(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = init_random_model("tiny-qwen3", tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert len(tok) == len(AutoTokenizer.from_pretrained(qwen_tokenizer_dir()))
    assert model.config.vocab_size == 151936 >= len(tok)
    assert tok.convert_tokens_to_ids("<|im_end|>") == model.config.eos_token_id
