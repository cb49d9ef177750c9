"""`explain`: every number it prints is the one the module computes. Forward hooks (and a wrapper
round the reference attention) record the module's own intermediates in a real forward pass;
each explained step must equal its counterpart, and every step must have one."""

import json
import math

import pytest
import torch

import transduce.models.attention as attention_module
from transduce.cli import main
from transduce.viz.explain import explain, explain_layer

from .conftest import EOS, save_toy_model, tiny_model, tiny_rnn

LABELS = ["a", "b", "c", "d", "</s>"]


def _record(model, layer: int, monkeypatch) -> dict:
    """The module's intermediates of encoder layer `layer` in one `attention_maps` pass."""
    seen: dict = {}
    block = model.encoder_layers[layer]

    def keep(name, what="output"):
        def hook(module, inputs, output):
            if block_is_running[0]:
                seen[name] = (inputs[0] if what == "input" else output)[0]

        return hook

    block_is_running = [False]
    block.register_forward_pre_hook(lambda m, i: block_is_running.__setitem__(0, True))
    block.register_forward_hook(lambda m, i, o: block_is_running.__setitem__(0, False))
    block.register_forward_hook(lambda m, i, o: seen.__setitem__("output", o[0][0]))

    def first(name):  # the encoder's call comes before the decoder's; None keeps the output
        def hook(module, inputs, output):
            seen.setdefault(name, output[0])

        return hook

    model.src_embed.register_forward_hook(first("embedded"))
    model.src_embed.tokens.register_forward_hook(first("E"))
    for name in ("w_q", "w_k", "w_v"):
        getattr(block.self_attn, name).register_forward_hook(keep(name))
    block.self_attn.w_q.register_forward_hook(keep("attention.in", "input"))
    block.self_attn.register_forward_hook(lambda m, i, o: seen.__setitem__("multihead", o[0][0]))
    for residual in ("self_attn_residual", "ffn_residual"):
        norm = getattr(block, residual).norm
        norm.register_forward_hook(keep(f"{residual}.in", "input"))
        norm.register_forward_hook(keep(f"{residual}.out"))
    block.ffn.register_forward_hook(keep("ffn.in", "input"))
    block.ffn.register_forward_hook(keep("ffn"))
    block.ffn.w_2.register_forward_hook(keep("ffn_hidden", "input"))

    reference = attention_module.attention_reference

    def recorded(q, k, v, mask, dropout=0.0):
        out, weights = reference(q, k, v, mask, dropout)
        if block_is_running[0]:
            seen.update(q=q[0], k=k[0], v=v[0], mask=mask, out=out[0], weights=weights[0])
        return out, weights

    monkeypatch.setattr(attention_module, "attention_reference", recorded)
    return seen


def _expected(model, seen: dict, pre_norm: bool, layer: int) -> dict:
    """Each step's value as the module computed it."""
    attention = model.encoder_layers[layer].self_attn
    h, d_k, d_v = attention.h, attention.d_k, attention.d_v
    n = seen["q"].size(1)
    position = model.src_embed.sinusoid[:n].to(seen["E"].dtype)
    x_1 = seen["ffn.in"] if not pre_norm else seen["ffn_residual.in"]
    expected = {
        "E": seen["E"], "E_scaled": seen["embedded"] - position, "PE": position,
        ("X" if layer == 0 else "X_embed"): seen["embedded"],
        "Q": seen["w_q"], "K": seen["w_k"], "V": seen["w_v"],
        "concat": seen["out"].transpose(0, 1).reshape(n, h * d_v),
        "multihead": seen["multihead"], "X_1": x_1,
        "ffn_hidden": seen["ffn_hidden"], "ffn": seen["ffn"], "output": seen["output"],
    }  # fmt: skip
    if pre_norm:  # X -> LN -> sublayer; the sums are the residual stream itself
        expected |= {"H": seen["self_attn_residual.out"], "H_ffn": seen["ffn_residual.out"]}
        expected |= {"sum_1": seen["ffn_residual.in"], "sum_2": seen["output"]}
    else:  # sublayer -> sum -> LN
        expected |= {"sum_1": seen["self_attn_residual.in"], "sum_2": seen["ffn_residual.in"]}
    if layer > 0:  # the input of a later layer, as the module's first sublayer received it
        expected["X"] = seen["self_attn_residual.in"] if pre_norm else seen["attention.in"]
    for i in range(h):
        q, k = seen["q"][i], seen["k"][i]  # (S, d_k) as the module split the heads
        scores = q @ k.T
        expected |= {
            f"Q_{i}": q, f"K_{i}": k, f"V_{i}": seen["v"][i],
            f"scores_{i}": scores, f"scaled_{i}": scores / math.sqrt(d_k),
            f"masked_{i}": (scores / math.sqrt(d_k)).masked_fill(~seen["mask"][0, 0], -math.inf),
            f"weights_{i}": seen["weights"][i], f"Z_{i}": seen["out"][i],
        }  # fmt: skip
    return expected


@pytest.mark.parametrize(
    "pre_norm, layer, d_v",
    [(False, 0, 8), (True, 0, 8), (False, 1, 8), (True, 1, 8), (False, 0, 4)],
)
def test_every_explained_number_is_the_modules_own(pre_norm, layer, d_v, monkeypatch):
    model = tiny_model(pre_norm=pre_norm, d_v=d_v)  # float64, 2 layers, 2 heads, d_k 8
    src = torch.tensor([[4, 5, 6, 4, EOS]])
    seen = _record(model, layer, monkeypatch)
    with torch.no_grad():
        model.attention_maps(src, torch.tensor([[2]]))
    explained = explain_layer(model, src, LABELS, layer)
    expected = _expected(model, seen, pre_norm, layer)
    keys = {step.key for step in explained.steps}
    assert keys == set(expected)
    for key, value in expected.items():
        assert explained[key].shape == value.shape, key
        torch.testing.assert_close(explained[key], value, atol=1e-6, rtol=0, msg=key)
    for i in range(model.config.h):
        rows = explained[f"weights_{i}"].sum(-1)
        torch.testing.assert_close(rows, torch.ones_like(rows))


def test_the_random_model_explains_in_text_and_json(capsys):
    found = explain("the cat sat on the mat", seed=0, d_model=4, heads=2)
    assert found.tokens == ["the", "cat", "sat", "on", "the", "mat", "</s>"]
    assert found["X"].shape == (7, 4) and found["Q_1"].shape == (7, 2)
    text = found.text()
    for step in found.steps:
        assert step.title in text
    assert explain("the cat sat on the mat", seed=0)["output"].equal(found["output"])
    main(["explain", "--sentence", "the cat sat", "--json", "--heads", "1"])
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert [s["key"] for s in steps][:4] == ["E", "E_scaled", "PE", "X"]
    assert "weights_0" in {s["key"] for s in steps} and "weights_1" not in {s["key"] for s in steps}


def test_explain_reads_a_saved_model(tmp_path, capsys):
    model = save_toy_model(tmp_path)
    main(["explain", "--sentence", "the children playing outside", "--model", str(model)])
    out = capsys.readouterr().out
    assert "tokens: ▁the ▁children ▁playing" in out and "QK^T / sqrt(d_k)" in out
    with pytest.raises(ValueError, match="multiple of heads"):
        explain("a b", d_model=5, heads=2)


def test_explain_refuses_what_it_cannot_walk():
    model = tiny_model()  # 2 encoder layers
    src = torch.tensor([[4, 5, 6, 4, EOS]])
    with pytest.raises(ValueError, match="layers 0 to 1"):
        explain_layer(model, src, LABELS, layer=2)
    with pytest.raises(ValueError, match="at least one word"):
        explain("   ")
    with pytest.raises(ValueError, match="this model has none"):
        explain_layer(tiny_rnn(), src, LABELS)
    with pytest.raises(KeyError, match="no step 'H'"):  # post-norm: no LayerNorm before
        explain_layer(model, src, LABELS)["H"]


def test_the_random_model_is_sized_as_the_paper_and_keeps_the_sentence_as_given():
    """d_ff = 4 d_model, as the paper's 2048 / 512; the sentence without the spaces around it."""
    found = explain("  the cat sat \n", d_model=8, heads=2)
    assert (found.settings["d_ff"], found["ffn_hidden"].shape) == (32, (4, 32))
    assert found.sentence == "the cat sat" and "sentence: the cat sat\n" in found.text()


def test_keys_at_padding_get_no_attention():
    model = tiny_model()
    src = torch.tensor([[4, 5, EOS, model.pad]])
    explained = explain_layer(model, src, ["a", "b", "</s>", "<pad>"])
    for i in range(model.config.h):
        assert explained[f"masked_{i}"][:, -1].eq(-math.inf).all()
        assert explained[f"weights_{i}"][:, -1].eq(0).all()


def test_learned_positions_are_the_models_own_table():
    """Table 3 row E: the explained PE and X are the learned table's rows, as the module adds."""
    model = tiny_model(positions="learned")
    src = torch.tensor([[4, 5, 6, EOS]])
    explained = explain_layer(model, src, LABELS[1:])
    with torch.no_grad():
        torch.testing.assert_close(explained["PE"], model.src_embed.positions.weight[:4])
        torch.testing.assert_close(explained["X"], model.src_embed(src)[0])
        explained["PE"].zero_()  # the explanation holds copies: editing them leaves the model
        assert model.src_embed.positions.weight[:4].abs().sum() > 0


def test_the_text_numbers_the_steps_and_cuts_long_and_wide_matrices_saying_so():
    found = explain("a b c d e", d_model=4, heads=2)  # 6 tokens; ffn_hidden is 16 wide
    whole = found.text(max_rows=6, max_columns=16)
    assert "more rows" not in whole and " …" not in whole
    assert "\n[1] token embeddings E" in whole and "\n[4] X = E x sqrt(d_model) + PE" in whole
    blocks = dict(zip([s.key for s in found.steps], found.text(5, 4).split("\n[")[1:], strict=True))
    x_rows = blocks["X"].splitlines()[-6:]
    assert [row.split()[0] for row in x_rows] == ["a", "b", "c", "d", "e", "…"]
    assert x_rows[-1] == "    … 1 more rows" and not x_rows[0].endswith("…")  # 4 columns: all
    assert all(row.endswith(" …") for row in blocks["ffn_hidden"].splitlines()[-6:-1])


def test_json_keeps_the_words_as_written_and_labels_attention_columns_with_them():
    found = explain("café crème", d_model=4, heads=2)
    assert '"café"' in found.to_json()
    steps = {step["key"]: step for step in json.loads(found.to_json())["steps"]}
    assert steps["weights_0"]["columns"] == ["café", "crème", "</s>"]  # key tokens
    assert steps["X"]["columns"] == ["0", "1", "2", "3"]  # dimensions


def test_the_rows_of_a_printed_matrix_line_up_whatever_the_tokens_lengths():
    # guards the row labels padded to the longest token, not to the longest column name
    block = explain("a bb", d_model=4, heads=2).text().split("\n[")[1]  # E: 3 rows of 4 dims
    rows = block.splitlines()[-3:]
    assert [row.split()[0] for row in rows] == ["a", "bb", "</s>"]
    assert len({len(row) for row in rows}) == 1
