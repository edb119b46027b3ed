"""core/rundir.py: the run directory's names, the atomic writer and the one JSON-lines reader (strict and tolerant)."""

from __future__ import annotations

import logging

import pytest

from rolecast.core.errors import ConfigError
from rolecast.core.rundir import (
    RunPaths,
    append_jsonl,
    episodes_file,
    episodes_file_step,
    eval_set_file,
    read_jsonl,
    write_atomic,
    write_jsonl,
)


def test_layout_names(tmp_path):
    p = RunPaths(tmp_path)
    assert p.metrics == tmp_path / "metrics.jsonl"
    assert p.eval() == tmp_path / "eval.jsonl"
    assert p.eval("math500") == tmp_path / "eval_math500.jsonl"
    assert eval_set_file("gsm8k") == "eval_gsm8k.jsonl"
    assert p.episodes(7) == tmp_path / "episodes" / "step_7.jsonl"
    assert p.checkpoint(3) == tmp_path / "checkpoints" / "step_3"
    assert episodes_file(12) == "step_12.jsonl"
    assert episodes_file_step("step_12.jsonl") == 12
    for name in ("step_.jsonl", "step_1.json", "step_1.jsonl.tmp", "xstep_1.jsonl", "step_-1.jsonl", "step_1a.jsonl"):
        assert episodes_file_step(name) is None
    assert p.episode_steps() == []
    (tmp_path / "episodes").mkdir()
    for name in ("step_10.jsonl", "step_2.jsonl", "notes.txt", ".step_3.jsonl.tmp-1"):
        (tmp_path / "episodes" / name).write_text("")
    assert p.episode_steps() == [2, 10]


def test_write_atomic_text_and_bytes_leave_no_temp_file(tmp_path):
    path = tmp_path / "summary.json"
    write_atomic(path, "é\n")
    assert path.read_bytes() == "é\n".encode()
    write_atomic(path, b"\x89PNG")
    assert path.read_bytes() == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_append_and_write_jsonl_spell_rows_as_json_dumps(tmp_path):
    path = tmp_path / "metrics.jsonl"
    append_jsonl(path, {"step": 1, "x": "é"})
    append_jsonl(path, {"step": 2, "x": None})
    assert path.read_text() == '{"step": 1, "x": "\\u00e9"}\n{"step": 2, "x": null}\n'
    write_jsonl(path, [{"t": "é"}], ensure_ascii=False)
    assert path.read_text(encoding="utf-8") == '{"t": "é"}\n'
    assert read_jsonl(path) == [{"t": "é"}]


def test_read_jsonl_strict_drops_a_torn_last_line_and_names_damage(tmp_path, caplog):
    path = tmp_path / "eval.jsonl"
    assert read_jsonl(path) == []
    path.write_bytes(b'{"step": 1}\n\n{"step": 2}\n{"step": 3, "x": "\xc3')  # cut inside a UTF-8 character
    with caplog.at_level(logging.WARNING):
        assert read_jsonl(path) == [{"step": 1}, {"step": 2}]
    assert "eval.jsonl: dropped a half-written last line (line 4" in caplog.text
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ConfigError, match=r"eval.jsonl:2: not a JSON line"):
        read_jsonl(path)
    path.write_text('{"step": 1}\n[1, 2]\n{"step": 2}\n')
    with pytest.raises(ConfigError, match=r"eval.jsonl:2: not a JSON line \(not a JSON object\)"):
        read_jsonl(path)


def test_read_jsonl_tolerant_skips_every_bad_line_and_says_which(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n3\n{"step": 2}\r\n{"step": 3, "x": "\u2028"}\n{"ste')
    skipped: list[int] = []
    assert read_jsonl(path, skipped=skipped) == [{"step": 1}, {"step": 2}, {"step": 3, "x": "\u2028"}]
    assert skipped == [2, 3, 6]
    assert read_jsonl(tmp_path, skipped=[]) == []  # a directory: unreadable, read as empty
