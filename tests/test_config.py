import dataclasses
import json
import re
import typing

import pytest

from transduce.cli.common import load_overrides
from transduce.config import (
    MODEL_FAMILIES,
    Config,
    ConfigError,
    DataConfig,
    DecodeConfig,
    RnnConfig,
    TaskConfig,
    TrainConfig,
    TransformerConfig,
    override,
    parse_assignments,
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
    for share in ("1.0", "-0.1"):
        with pytest.raises(ConfigError, match=r"train\.both_ways must be in \[0, 1\)"):
            override(base(), {"train.both_ways": share})
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


def test_a_yaml_file_of_the_wrong_shape_is_refused_naming_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("")
    assert load_overrides(path) == {}
    path.write_text("- train\n- model\n")
    with pytest.raises(
        ConfigError, match=f"{re.escape(str(path))}: expected a mapping of sections"
    ):
        load_overrides(path)
    path.write_text("train: 7\n")
    with pytest.raises(ConfigError, match="section 'train' must be a mapping"):
        load_overrides(path)
    path.write_text("train: {max_steps: [\n")
    with pytest.raises(
        ConfigError, match=f"{re.escape(str(path))} line 2, column 1: not valid YAML"
    ):
        load_overrides(path)


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


# Each check of the typed config: a value just past its bound is refused naming the field, and
# the bound itself (where it is allowed) is accepted.
REFUSED = {
    **{f"model.{n}": "0" for n in ("n_layers", "d_model", "d_ff", "h", "d_k", "d_v")},
    "model.max_positions": "0",
    "model.positions": "rotary",
    "model.vocab_size": "-1",
    "model.n_decoder_layers": "-1",
    "data.max_tokens": "0",
    "data.bucket_width": "0",
    "train.warmup_steps": "0",
    "train.lr_scale": "0",
    "train.lr": "0",
    "train.plateau_factor": "1.0",
    "train.plateau_patience": "0",
    "train.min_lr": "0.5",  # above train.lr
    "train.label_smoothing": "1.0",
    "train.accumulate": "0",
    "train.max_steps": "0",
    "train.max_epochs": "-1",
    "train.max_minutes": "-1",
    "train.valid_every": "0",
    "train.log_every": "0",
    "train.valid_beam": "0",
    "train.keep_last": "0",
    "train.average_last": "6",  # above train.keep_last
    "train.precision": "fp16",
    "train.compile": "maybe",
    "decode.beam_size": "0",
    "decode.alpha": "-0.1",
    "decode.max_len_a": "-0.5",
    "decode.max_len_b": "0",
    "decode.n_best": "5",  # above decode.beam_size
    "decode.batch_size": "0",
    "task.tokenize": "spacy",
}
ACCEPTED = {
    "train.min_lr": "1e-3",  # equal to train.lr
    "train.cooldown": "1.0",
    "train.label_smoothing": "0.0",
    "train.average_last": "5",
    "decode.alpha": "0",
    "decode.max_len_a": "0",
    "decode.n_best": "4",
    "train.max_epochs": "0",
    "train.max_minutes": "0",
    "model.vocab_size": "0",
    "model.n_decoder_layers": "0",
}


@pytest.mark.parametrize(("key", "value"), REFUSED.items())
def test_every_value_out_of_its_range_is_refused_naming_the_field(key, value):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}( must|:)"):
        override(base(), {key: value})


@pytest.mark.parametrize(("key", "value"), ACCEPTED.items())
def test_the_edges_of_each_range_are_accepted(key, value):
    assert str(
        getattr(getattr(override(base(), {key: value}), key.split(".")[0]), key.split(".")[1])
    )


def test_a_config_file_of_unknown_sections_or_sections_that_are_no_mappings_is_refused():
    with pytest.raises(ConfigError, match=r"unknown config sections: \['optimiser'\]"):
        Config.from_dict({"train": {}, "optimiser": {"lr": 1}})
    with pytest.raises(ConfigError, match="config section 'train' must be a mapping"):
        Config.from_dict({"train": [1, 2]})
    with pytest.raises(ConfigError, match=r"unknown config keys: \['decode\.beam'\]"):
        Config.from_dict({"decode": {"beam": 4}})


@pytest.mark.parametrize("key", ["optimiser.lr", "train", "train."])
def test_an_override_outside_the_sections_is_refused(key):
    with pytest.raises(ConfigError, match=f"unknown config key: {re.escape(key)}$"):
        override(base(), {key: "1"})


def test_typed_values_from_a_yaml_file_are_checked_not_converted_blindly():
    config = override(base(), {"train.lr": 1, "train.max_steps": 20, "model.pre_norm": True})
    assert (config.train.lr, config.train.max_steps, config.model.pre_norm) == (1.0, 20, True)
    for key, value in (("train.max_steps", True), ("train.max_steps", 2.5), ("train.lr", "x")):
        with pytest.raises(ConfigError, match=re.escape(key)):
            override(base(), {key: value})


def test_a_new_model_family_starts_from_its_defaults_and_keeps_the_vocabulary():
    sized = override(base(), {"model.vocab_size": 300})
    recurrent = override(sized, {"model.family": "rnn", "model.n_layers": 2})
    assert type(recurrent.model) is RnnConfig and recurrent.model.vocab_size == 300
    assert recurrent.model == RnnConfig(n_layers=2, vocab_size=300)


def test_set_arguments_are_key_equals_value():
    assert parse_assignments(["train.max_steps = 20", "task.tokenize=none"]) == {
        "train.max_steps": "20",
        "task.tokenize": "none",
    }
    for bad in ("train.max_steps", "=20"):
        with pytest.raises(ConfigError, match=f"expected key=value, got '{bad}'"):
            parse_assignments([bad])


def test_a_model_section_refuses_the_other_familys_name():
    with pytest.raises(ConfigError, match=r"model\.family of a TransformerConfig is transformer"):
        TransformerConfig(family="rnn")
    with pytest.raises(ConfigError, match=r"model\.family of an RnnConfig is rnn"):
        RnnConfig(family="transformer")


def test_every_field_is_of_a_type_an_override_can_read():
    """`override` reads strings into int, float, str or bool; a field of another type (say
    `float | None`) would need reading taught first."""
    for section in (*MODEL_FAMILIES.values(), DataConfig, TrainConfig, DecodeConfig, TaskConfig):
        kinds = set(typing.get_type_hints(section).values())
        assert kinds <= {int, float, str, bool}, (section.__name__, kinds)


@pytest.mark.parametrize(
    ("raw", "expected"), [("1", True), ("0", False), ("TRUE", True), ("false", False)]
)
def test_a_boolean_set_as_1_or_0_is_read_as_true_or_false(raw, expected):
    assert override(base(), {"model.pre_norm": raw}).model.pre_norm is expected


def test_a_section_built_from_python_holds_values_of_the_declared_types():
    """`override` reads the command line's strings; from Python a dataclass takes anything, and
    TaskConfig(lowercase="false") scored lowercased (a non-empty str is true), silently. Every
    section checks itself, so one built alone (a model's, handed to `build_model`) is checked
    too, before its own rules compare a str with a number."""
    cases = [
        (lambda: TransformerConfig(pre_norm="false"), "model.pre_norm: expected bool, got str"),
        (lambda: TransformerConfig(d_model="512"), "model.d_model: expected int, got str '512'"),
        (lambda: RnnConfig(bidirectional=1), "model.bidirectional: expected bool, got int 1"),
        (lambda: DataConfig(max_tokens=2048.0), "data.max_tokens: expected int, got float"),
        (lambda: TrainConfig(max_steps="10"), "train.max_steps: expected int, got str '10'"),
        (lambda: TaskConfig(lowercase="false"), "task.lowercase: expected bool, got str 'false'"),
        (lambda: DecodeConfig(constrained="no"), "decode.constrained: expected bool"),
        (lambda: DecodeConfig(beam_size=True), "decode.beam_size: expected int, got bool True"),
        (lambda: Config(model=TransformerConfig(pre_norm="false")), "model.pre_norm: expected"),
        (lambda: Config(model=TransformerConfig(d_model=128.5)), "model.d_model: expected int"),
        (lambda: Config(model=None), "model: not a config section: None"),
        (lambda: Config(decode=TaskConfig()), "decode: not a config section"),
    ]
    for make, says in cases:
        with pytest.raises(ConfigError, match=re.escape(says)):
            make()
    assert TransformerConfig(dropout=0).dropout == 0  # an int is a float
    assert Config.from_dict(json.loads(Config().to_json())) == Config()


def test_an_int_is_a_float_and_an_infinite_alpha_or_length_is_refused():
    from transduce.config import Config, DecodeConfig, TransformerConfig

    assert DecodeConfig(alpha=1, max_len_a=0).alpha == 1
    assert Config(model=TransformerConfig(dropout=0)).model.dropout == 0
    for field in ("alpha", "max_len_a"):
        with pytest.raises(ConfigError, match=f"decode.{field} must be >= 0 and finite"):
            DecodeConfig(**{field: float("inf")})


def test_a_dev_sentence_longer_than_learned_positions_is_refused_too():
    """Validation decodes and scores every dev pair, never filtered by length."""
    import numpy as np

    from transduce.config import Config, TransformerConfig
    from transduce.tasks import _check_positions

    class Split:
        def __init__(self, longest: int) -> None:
            self.src_lengths, self.tgt_lengths = np.array([3, longest]), np.array([4, 4])

        def __len__(self) -> int:
            return 2

    class Data:
        def __init__(self) -> None:
            self.splits = {"train": Split(9), "dev": Split(20)}
            self.split = self.splits.__getitem__

    def learned(size: int) -> Config:
        return Config(model=TransformerConfig(positions="learned", max_positions=size))

    with pytest.raises(ConfigError, match=r"set model\.max_positions=21 or more"):
        _check_positions(learned(12), Data())
    # guards: 20 subwords need 21 positions (EOS, or BOS in the decoder's input): 20 is too few
    with pytest.raises(ConfigError, match=r"set model\.max_positions=21 or more"):
        _check_positions(learned(20), Data())
    _check_positions(learned(21), Data())


def test_setting_the_model_family_a_model_already_has_keeps_the_model():
    # guards: `--set model.family=transformer` resetting a preset's model to the defaults
    for name in ("tiny", "parse-tiny", "rnn-tiny"):
        config = preset(name)
        assert override(config, {"model.family": config.model.family}) == config, name


def test_the_cpu_and_parsing_presets_keep_their_documented_settings():
    # guards: the presets' documented choices (presets.py docstrings) drifting silently
    assert (preset("tiny").train.keep_last, preset("tiny").train.average_last) == (10, 10)
    assert preset("tiny").decode.alpha == 1.0
    demo = preset("demo")
    assert (demo.decode.alpha, demo.train.average_last, demo.model.dropout) == (1.4, 1, 0.1)
    assert demo.train.warmup_steps == 200
    for name in ("parse", "parse-tiny"):  # the reference parser's softmax is its own matrix
        assert preset(name).model.tie_output is False, name
