import dataclasses
import json

import pytest

from transduce.config import (
    Config,
    ConfigError,
    load_overrides,
    override,
)
from transduce.presets import base, big, preset, table3


def test_presets_follow_table_3():
    assert (base().model.d_model, base().model.h, base().model.dropout) == (512, 8, 0.1)
    assert (big().model.d_model, big().model.d_ff, big().model.h, big().model.dropout) == (
        1024,
        4096,
        16,
        0.3,
    )
    b1 = table3("B", 1).model
    assert (b1.d_k, b1.d_v) == (16, 64)
    assert preset("E1").model.positions == "learned"
    assert preset("D3").train.label_smoothing == 0.0


def test_overrides_are_typed_and_unknown_keys_are_errors():
    config = override(
        base(), {"train.max_steps": "20", "model.pre_norm": "true", "train.lr_scale": "2"}
    )
    assert config.train.max_steps == 20 and config.model.pre_norm and config.train.lr_scale == 2.0
    with pytest.raises(ConfigError, match=r"train\.nonsense"):
        override(base(), {"train.nonsense": "1"})
    with pytest.raises(ConfigError, match=r"train\.max_steps"):
        override(base(), {"train.max_steps": "many"})


def test_invalid_values_name_the_field():
    with pytest.raises(ConfigError, match=r"model\.dropout"):
        override(base(), {"model.dropout": "1.5"})
    for name in ("attention_dropout", "relu_dropout"):
        with pytest.raises(ConfigError, match=rf"model\.{name} must be in \[0, 1\)"):
            override(base(), {f"model.{name}": "1.0"})
    for rate in ("1.0", "-0.1"):
        with pytest.raises(ConfigError, match=r"data\.bpe_dropout must be in \[0, 1\)"):
            override(base(), {"data.bpe_dropout": rate})
    with pytest.raises(ConfigError, match=r"train\.cooldown must be in \[0, 1\]"):
        override(base(), {"train.cooldown": "1.5"})
    with pytest.raises(ConfigError, match="unknown preset"):
        preset("huge")


def test_json_round_trip(tmp_path):
    config = override(preset("tiny"), {"model.vocab_size": "100"})
    path = tmp_path / "config.json"
    path.write_text(config.to_json())
    assert Config.load(path) == config


def test_yaml_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  max_steps: 7\nmodel:\n  pre_norm: true\n")
    config = override(base(), load_overrides(path))
    assert config.train.max_steps == 7 and config.model.pre_norm
    assert dataclasses.replace(config.train, max_steps=100000) == base().train


def test_the_model_section_is_chosen_by_its_family():
    config = Config.from_dict({"model": {"family": "transformer", "d_model": 64}})
    assert config.model.family == "transformer" and config.model.d_model == 64
    # files written before the section was tagged have no family: a Transformer
    assert Config.from_dict({"model": {"d_model": 64}}).model == config.model
    with pytest.raises(ConfigError, match=r"model\.family must be one of \['rnn', 'transformer'\]"):
        Config.from_dict({"model": {"family": "lstm"}})
    recurrent = preset("rnn-tiny")
    assert Config.from_dict(json.loads(recurrent.to_json())) == recurrent
    assert type(recurrent.model).__name__ == "RnnConfig"
    with pytest.raises(ConfigError, match=r"model\.family must be one of"):
        override(base(), {"model.family": "lstm"})
    with pytest.raises(ConfigError, match=r"unknown config key: model\.hidden_size"):
        override(base(), {"model.hidden_size": "100"})


def test_the_task_and_schedule_sections_are_checked_and_round_trip():
    config = override(
        base(), {"task.tokenize": "none", "task.lowercase": "true", "train.schedule": "constant"}
    )
    assert Config.from_dict(json.loads(config.to_json())) == config
    with pytest.raises(ConfigError, match=r"train\.schedule must be one of"):
        override(base(), {"train.schedule": "cosine"})
    with pytest.raises(ConfigError, match=r"task\.name must be one of"):
        override(base(), {"task.name": "summarise"})
    # a config.json of version 0.1 (no task section) reads as translation scored by sacreBLEU
    legacy = json.loads(config.to_json())
    del legacy["task"]
    assert Config.from_dict(legacy).task.name == "translation"
