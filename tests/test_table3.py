"""Table 3's rows (experiments/table3.py) at bases they do not fit, and the parameter table that
`transduce sweep --params-only` prints: one well-formed line per row, each size in its column."""

from types import SimpleNamespace

import pytest

from transduce.config import ConfigError
from transduce.experiments import table3
from transduce.experiments.sweep import plan, sweep_base
from transduce.experiments.table3 import CannotScale, row_config
from transduce.models import build_model


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_a_row_at_a_base_without_its_field_cannot_scale_and_the_others_still_do():
    rnn = sweep_base("rnn-tiny")  # no heads, no d_k, no positions
    with pytest.raises(CannotScale, match=r"the base has no model\.h"):
        row_config(rnn, "A1")
    with pytest.raises(CannotScale, match=r"the base has no model\.positions"):
        row_config(rnn, "E1")
    assert row_config(rnn, "D2").model.dropout == round(rnn.model.dropout + 0.1, 6)


def test_a_row_the_table_does_not_have_is_refused_not_reported_as_unscaled():
    # A misspelt --rows must stop the sweep, not train the rest and note the typo as a row.
    with pytest.raises(ConfigError, match="Table 3 has no row 'A9'"):
        plan(sweep_base("tiny"), ["base", "A9"])


@pytest.mark.parametrize(
    "assignment, name, message",
    [
        ("model.d_ff=255", "C6", r"model\.d_ff = 255 x 1/2 = 127\.5 is no size"),
        ("model.d_model=127", "C4", r"model\.d_model = 127 x 1/2 = 63\.5 is no size"),
    ],
)
def test_only_the_layer_count_is_rounded_other_sizes_must_scale_to_a_whole_number(
    assignment, name, message
):
    with pytest.raises(CannotScale, match=message):
        row_config(sweep_base("tiny", assignments=[assignment]), name)


def test_the_params_table_has_one_well_formed_line_per_row_each_size_in_its_column():
    one_head = sweep_base("tiny", assignments=["model.h=1", "model.d_k=2", "model.d_v=2"])
    text = table3.params_table(one_head, vocab_size=100)
    assert text.endswith("\n")  # printed as it is by --params-only
    header, _, *lines = text.splitlines()
    columns = _cells(header)
    assert all(len(_cells(line)) == len(columns) for line in lines)  # B1 cannot scale, too
    named = [row.name for row in table3.ROWS if row.params_m is not None]
    assert [_cells(line)[0] for line in lines] == named  # each row once
    c6 = next(_cells(line) for line in lines if line.startswith("| C6 |"))
    c6 = dict(zip(columns, c6, strict=True))
    sizes = ("N", "d_model", "d_ff", "h", "d_k", "d_v")
    assert [c6[name] for name in sizes] == ["4", "128", "128", "1", "2", "2"]  # d_ff halved


def test_the_params_table_has_only_the_rows_asked_for_and_refuses_unknown_ones():
    base = sweep_base("tiny")
    lines = table3.params_table(base, vocab_size=100, rows=["C2", "A1", "B1"]).splitlines()[2:]
    # In the table's order; A1 states no count, so it has no line.
    assert [_cells(line)[0] for line in lines] == ["B1", "C2"]
    with pytest.raises(ConfigError, match="Table 3 has no row 'Z9'"):
        table3.params_table(base, vocab_size=100, rows=["A1", "Z9"])


def test_the_count_without_weights_is_the_built_models_number_of_weights():
    config = sweep_base("tiny")
    model = build_model(config.model, SimpleNamespace(size=100, pad=0))  # real weights
    assert table3.parameters(config, vocab_size=100) == sum(p.numel() for p in model.parameters())
