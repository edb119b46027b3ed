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


def test_stop_tokens_come_from_the_models_files():
    """Read from the tokenizer and generation config, the stop tokens are the ones hard-coded for Qwen before:
    <|im_end|> and <|endoftext|> (Qwen3's generation_config.json lists both); the testbed's are its
    <|im_end|> and padding <|endoftext|>, as before."""
    from transformers import AutoTokenizer, GenerationConfig

    from rolecast.policies.models import resolve_model_path
    from rolecast.rollout.hf import stop_token_ids

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    qwen3 = GenerationConfig(eos_token_id=[151645, 151643], pad_token_id=151643)  # Qwen/Qwen3-0.6B's
    before = {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
    assert set(stop_token_ids(tok, qwen3)) == before == {151643, 151645}
    for name in ("testbed", "testbed-large"):
        path = resolve_model_path(name)
        tok, config = AutoTokenizer.from_pretrained(path), GenerationConfig.from_pretrained(path)
        before = {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
        assert stop_token_ids(tok, config) == sorted(before) == [0, 2]
