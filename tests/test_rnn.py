"""The recurrent baseline (models/rnn.py, models/rnn_attention.py) against hand-written formulas:
the four score functions, Luong's input feeding and Bahdanau's wiring step by step, the packed
encoder, its settings, its presets' sizes, and a training run on the toy reverse task.

The contract (cached == full, batch == alone, reordering) is checked in test_contract.py.
"""

import math

import pytest
import torch

from transduce.config import ConfigError, DecodeConfig, override
from transduce.data.corpus import LengthFilter
from transduce.data.dataset import PreparedData, prepare
from transduce.decoding.translate import Translator
from transduce.models.rnn_attention import GlobalAttention
from transduce.presets import preset
from transduce.training import validation
from transduce.training.checkpoint import CheckpointStore, load
from transduce.training.loop import Trainer, train
from transduce.training.runlog import read_log

from .conftest import BOS, EOS, PAD, reverse_task_files, tiny_rnn


def _random(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- the score functions, by hand ---------------------------------------------------------------


def _hand_score(name: str, score, q: torch.Tensor, h: torch.Tensor) -> float:
    """One score(h'_j = q, h_i = h) written as in the papers, on vectors."""
    if name == "dot":
        return float(sum(q[k] * h[k] for k in range(q.numel())))
    if name == "general":  # h'_j^T W_a h_i
        return float(q @ (score.W_a.weight @ h))
    if name == "concat":  # v_a^T tanh(W_a [h'_j; h_i]), W_a one matrix
        W_a = torch.cat([score.W_a.weight, score.U_a.weight], dim=1)
        return float(score.v_a.weight[0] @ torch.tanh(W_a @ torch.cat([q, h])))
    # additive: v_a^T tanh(W_a s_{j-1} + U_a h_i)
    return float(score.v_a.weight[0] @ torch.tanh(score.W_a.weight @ q + score.U_a.weight @ h))


@pytest.mark.parametrize("name", ["dot", "general", "concat", "additive"])
@torch.no_grad()
def test_each_score_function_equals_its_formula(name):
    d_model, d_memory = 3, 3 if name == "dot" else 5
    torch.manual_seed(0)
    attention = GlobalAttention(name, d_model, d_memory).double()
    query = _random(2, 4, d_model, seed=1)  # 2 sentences, 2 beams x 2 positions each
    memory = _random(2, 3, d_memory, seed=2)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    context, alpha = attention(query, attention.keys(memory), memory, mask)
    for b in range(2):
        for j in range(4):
            real = [i for i in range(3) if mask[b, i]]
            scores = torch.tensor(
                [_hand_score(name, attention.score, query[b, j], memory[b, i]) for i in real],
                dtype=torch.float64,
            )
            expected = torch.zeros(3, dtype=torch.float64)
            expected[real] = torch.exp(scores) / torch.exp(scores).sum()
            torch.testing.assert_close(alpha[b, j], expected, rtol=0, atol=1e-12)
            c = sum(expected[i] * memory[b, i] for i in range(3))
            torch.testing.assert_close(context[b, j], c, rtol=0, atol=1e-12)
    assert alpha[1, :, 2].abs().max() == 0  # nothing on padding


# --- step-by-step references with the module's weights -----------------------------------------


def _lstm_cell(rnn, name: str, x, h, c):
    """One LSTM step of torch's parametrisation: gates i, f, g, o from W_ih x + W_hh h + b."""
    gates = (
        getattr(rnn, f"weight_ih_{name}") @ x
        + getattr(rnn, f"bias_ih_{name}")
        + getattr(rnn, f"weight_hh_{name}") @ h
        + getattr(rnn, f"bias_hh_{name}")
    )
    i, f, g, o = gates.chunk(4)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _run(rnn, name: str, inputs: list, d: int):
    """An LSTM layer over a list of vectors from zero: its outputs and last (h, c)."""
    h = c = torch.zeros(d, dtype=torch.float64)
    outputs = []
    for x in inputs:
        h, c = _lstm_cell(rnn, name, x, h, c)
        outputs.append(h)
    return outputs, (h, c)


def _encoder_reference(model, tokens: list[int], layers: int, bidirectional: bool):
    """h_i of the top layer and each layer's last states, directions concatenated."""
    rnn, d = model.encoder.rnn, model.config.d_model
    x = [model.encoder.tokens.weight[t] for t in tokens]
    finals = []
    for layer in range(layers):
        forward, (h, c) = _run(rnn, f"l{layer}", x, d)
        if not bidirectional:
            x, finals = forward, [*finals, (h, c)]
            continue
        backward, (hb, cb) = _run(rnn, f"l{layer}_reverse", x[::-1], d)
        x = [torch.cat([f, b]) for f, b in zip(forward, backward[::-1], strict=True)]
        finals.append((torch.cat([h, hb]), torch.cat([c, cb])))
    return torch.stack(x), finals


def _decoder_layers(rnn, x, states: list) -> tuple[torch.Tensor, list]:
    """The decoder's stacked LSTM, one step: the top h'_j and every layer's new state."""
    new = []
    for layer, (h, c) in enumerate(states):
        h, c = _lstm_cell(rnn, f"l{layer}", x, h, c)
        new.append((h, c))
        x = h
    return x, new


def _softmax_attention(scores: torch.Tensor, memory: torch.Tensor):
    alpha = torch.exp(scores) / torch.exp(scores).sum()
    return alpha, alpha @ memory


def _output(decoder, c, h):
    """h~'_j = tanh(W_c [c_j; h'_j] + b_c), logits W_o h~'_j + b_o."""
    attentional = torch.tanh(decoder.W_c.weight @ torch.cat([c, h]) + decoder.W_c.bias)
    return attentional, decoder.W_o.weight @ attentional + decoder.b_o


SOURCE, TARGET = [5, 6, 7, 8, EOS], [BOS, 4, 9, 10, 11]


def _ours(model):
    """The model's logits and alpha for SOURCE -> TARGET, decoded beside a shorter sentence."""
    src = torch.tensor([SOURCE, [9, 4, EOS, PAD, PAD]])
    tgt = torch.tensor([TARGET, [BOS, 11, 10, 9, 4]])
    logits, maps = model.attention_maps(src, tgt)
    return logits[0], maps.decoder_cross[0][0, 0]  # (T, V), (T, S)


def _assert_luong_reference(model, score_of, feeding: bool) -> None:
    """Luong et al. 2015, step by step: h'_j = LSTM([Emb(y_{j-1}); h~'_{j-1} if input feeding],
    h'_{j-1}) from zeros, then alpha_j from score_of(h'_j, h_i) over the memory, c_j, h~'_j and
    the logits, which the model's must equal."""
    memory, _ = _encoder_reference(model, SOURCE, 2, bidirectional=False)
    decoder, d = model.decoder, model.config.d_model
    states = [(torch.zeros(d, dtype=torch.float64),) * 2 for _ in range(2)]
    feed = torch.zeros(d, dtype=torch.float64)
    logits, alphas = [], []
    for y in TARGET:
        x = torch.cat([decoder.tokens.weight[y], feed]) if feeding else decoder.tokens.weight[y]
        h, states = _decoder_layers(decoder.rnn, x, states)
        alpha, c = _softmax_attention(torch.stack([score_of(h, m) for m in memory]), memory)
        feed, out = _output(decoder, c, h)
        logits.append(out)
        alphas.append(alpha)
    ours, alpha = _ours(model)
    torch.testing.assert_close(ours, torch.stack(logits), rtol=0, atol=1e-12)
    torch.testing.assert_close(alpha, torch.stack(alphas), rtol=0, atol=1e-12)


def test_input_feeding_equals_a_step_by_step_reference():
    """Luong et al. 2015: h'_j = LSTM([Emb(y_{j-1}); h~'_{j-1}], h'_{j-1}) with h~'_0 = 0 and
    h'_0 = 0; alpha from h'_j with the general score."""
    model = tiny_rnn(7, n_layers=2, score="general", input_feeding=True)
    W_a = model.decoder.attention.score.W_a.weight
    _assert_luong_reference(model, lambda h, m: h @ W_a @ m, feeding=True)


@pytest.mark.parametrize("feeding", [False, True])
def test_luong_concat_asks_with_the_current_state_a_step_by_step_reference(feeding):
    """Luong et al. 2015 (eq. 8): concat scores h'_j, the state after this step's recurrence
    h'_j = LSTM([Emb(y_{j-1}); h~'_{j-1} if input feeding], h'_{j-1}): the function of Bahdanau's
    additive score, wired as Luong's, not as Bahdanau's."""
    model = tiny_rnn(9, score="concat", input_feeding=feeding)
    score = model.decoder.attention.score
    W_a = torch.cat([score.W_a.weight, score.U_a.weight], dim=1)  # W_a [h'_j; h_i], one matrix
    v_a = score.v_a.weight[0]
    _assert_luong_reference(model, lambda h, m: v_a @ torch.tanh(W_a @ torch.cat([h, m])), feeding)


def test_bahdanau_wiring_equals_a_step_by_step_reference():
    """Bahdanau et al. 2015: a bidirectional encoder, s_0 = tanh(W_b [last states] + b_b);
    alpha_j from the PREVIOUS state s_{j-1}; s_j = LSTM([Emb(y_{j-1}); c_j], s_{j-1})."""
    model = tiny_rnn(
        8, score="additive", input_feeding=False, bidirectional=True, decoder_init="bridge"
    )
    memory, finals = _encoder_reference(model, SOURCE, 2, bidirectional=True)
    decoder, score = model.decoder, model.decoder.attention.score
    states = [
        (
            torch.tanh(decoder.W_b.weight @ h + decoder.W_b.bias),
            torch.tanh(decoder.W_b_cell.weight @ c + decoder.W_b_cell.bias),
        )
        for h, c in finals
    ]
    logits, alphas = [], []
    for y in TARGET:
        previous = states[-1][0]  # the top layer's s_{j-1}
        scores = torch.stack(
            [
                score.v_a.weight[0] @ torch.tanh(score.W_a.weight @ previous + score.U_a.weight @ m)
                for m in memory
            ]
        )
        alpha, c = _softmax_attention(scores, memory)
        h, states = _decoder_layers(decoder.rnn, torch.cat([decoder.tokens.weight[y], c]), states)
        logits.append(_output(decoder, c, h)[1])
        alphas.append(alpha)
    ours, alpha = _ours(model)
    torch.testing.assert_close(ours, torch.stack(logits), rtol=0, atol=1e-12)
    torch.testing.assert_close(alpha, torch.stack(alphas), rtol=0, atol=1e-12)


def test_padding_changes_nothing_in_the_packed_encoder():
    model = tiny_rnn(9, bidirectional=True, decoder_init="bridge")
    alone = model.encode(torch.tensor([SOURCE]))
    padded = model.encode(torch.tensor([SOURCE + [PAD] * 3, [4, EOS] + [PAD] * 6]))
    n = len(SOURCE)
    torch.testing.assert_close(padded.memory[0, :n], alone.memory[0], rtol=0, atol=1e-12)
    assert padded.memory[0, n:].abs().max() == 0
    torch.testing.assert_close(padded.final_hidden[:, :1], alone.final_hidden, rtol=0, atol=1e-12)
    torch.testing.assert_close(padded.final_cell[:, :1], alone.final_cell, rtol=0, atol=1e-12)


def test_dropout_reaches_the_embeddings_and_between_recurrent_layers_only():
    src = torch.tensor([[4, 5, 6, EOS], [7, 8, EOS, PAD]])
    one = tiny_rnn(0, n_layers=1, dropout=0.5).train()
    assert one.encoder.rnn.dropout == one.decoder.rnn.dropout == 0.0  # no layer above to feed
    first, second = one.encode(src).memory, one.encode(src).memory
    assert not torch.equal(first, second)  # only the embeddings' dropout can tell them apart
    two = tiny_rnn(0, n_layers=2, dropout=0.3)
    assert two.encoder.rnn.dropout == two.decoder.rnn.dropout == 0.3


def test_the_decoder_drops_out_its_embeddings_too():
    """Luong's wiring without input feeding: alpha_ij depends on h'_j = RNN(Emb(y_{j-1}), ...)
    alone, so only the dropout of the target embeddings can make two passes differ."""
    model = tiny_rnn(0, n_layers=1, input_feeding=False, dropout=0.5)
    src, tgt = torch.tensor([[4, 5, 6, EOS]]), torch.tensor([[BOS, 7, 8, 9]])
    encoded = model.eval().encode(src)
    model.train()
    first = model.decoder(tgt, model.init_cache(encoded))[1]
    assert not torch.equal(first, model.decoder(tgt, model.init_cache(encoded))[1])


def test_the_decoder_drops_out_the_attentional_vector_before_the_output_layer():
    """Dropout on h~'_j = tanh(W_c [c_j; h'_j] + b_c) itself: in training each entry is 0 or
    2 h~'_j (p = 0.5). Padding as the target input embeds as zero, so with one layer and no
    input feeding that dropout is the pass's only randomness; W_o = I, b_o = 0 show h~'_j."""
    model = tiny_rnn(0, n_layers=1, input_feeding=False, dropout=0.5, vocab_size=16)
    with torch.no_grad():
        model.decoder.W_o.weight.copy_(torch.eye(16))
        model.decoder.b_o.zero_()
    src, tgt = torch.tensor([[4, 5, 6, EOS]]), torch.full((1, 6), PAD)
    encoded = model.eval().encode(src)
    attentional = model.decoder(tgt, model.init_cache(encoded))[0]  # no dropout: h~'_j
    torch.manual_seed(0)
    dropped = model.train().decoder(tgt, model.init_cache(encoded))[0]
    zero, doubled = dropped == 0, torch.isclose(dropped, 2 * attentional, rtol=0, atol=1e-12)
    assert (zero | doubled).all() and zero.any() and (doubled & (attentional != 0)).any()


def test_every_parameter_starts_uniform_in_a_tenth_and_padding_embeds_as_zero():
    """Luong et al. s4.1: every parameter U(-0.1, 0.1); the padding rows stay zero."""
    model = tiny_rnn(0, d_model=64, d_embed=64, vocab_size=300)
    values = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert values.abs().max().item() <= 0.1
    assert values.std().item() == pytest.approx(0.1 / 3**0.5, rel=0.05)
    for tokens in (model.encoder.tokens, model.decoder.tokens):
        assert torch.count_nonzero(tokens.weight[PAD]) == 0
    assert model.encoder.tokens is not model.decoder.tokens


def test_a_tied_output_keeps_its_own_bias():
    """y_j = softmax(W_o h~'_j + b_o) with W_o the target embedding: b_o stays."""
    model = tiny_rnn(0, d_embed=16, tie_output=True)
    src, tgt = torch.tensor([[4, 5, 6, EOS]]), torch.tensor([[BOS, 7, 8]])
    before = model(src, tgt)
    with torch.no_grad():
        model.decoder.b_o[5] += 3.0
    shift = model(src, tgt) - before
    torch.testing.assert_close(shift[..., 5], torch.full_like(shift[..., 5], 3.0))
    assert torch.count_nonzero(shift[..., :5]) == torch.count_nonzero(shift[..., 6:]) == 0


def test_attention_maps_are_one_head_over_the_source():
    model = tiny_rnn(10, score="concat")
    src = torch.tensor([SOURCE, [4, 5, EOS, PAD, PAD]])
    tgt = torch.tensor([TARGET, TARGET])
    _, maps = model.attention_maps(src, tgt)
    (alpha,) = maps.decoder_cross
    assert alpha.shape == (2, 1, len(TARGET), len(SOURCE))
    assert maps.encoder_self == [] and maps.decoder_self == []


# --- settings, presets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"model.score": "cosine"}, r"model\.score must be one of"),
        ({"model.cell": "elman"}, r"model\.cell"),
        ({"model.decoder_init": "mean"}, r"model\.decoder_init"),
        ({"model.score": "dot"}, r"model\.score=dot.*model\.memory_projection"),
        ({"model.score": "additive"}, r"model\.input_feeding"),
        ({"model.d_embed": "64"}, r"model\.tie_output"),
        ({"model.dropout": "1"}, r"model\.dropout"),
    ],
)
def test_bad_settings_fail_naming_the_field(changes, field):
    with pytest.raises(ConfigError, match=field):
        override(preset("rnn-tiny"), changes)  # bidirectional, input feeding, tied


def test_dot_fits_a_bidirectional_encoder_through_the_projection():
    config = override(preset("rnn-tiny"), {"model.score": "dot", "model.memory_projection": "1"})
    assert config.model.d_memory == config.model.d_model


def test_a_transformer_preset_turns_recurrent_with_its_defaults():
    config = override(preset("tiny"), {"model.family": "rnn", "model.d_model": "64"})
    assert (config.model.family, config.model.d_model, config.model.score) == ("rnn", 64, "general")


@pytest.mark.parametrize(
    ("rnn", "transformer", "vocab"), [("rnn-tiny", "tiny", 10000), ("rnn-small", "small", 8000)]
)
def test_params_counts_the_rnn_presets_near_their_transformers(rnn, transformer, vocab, capsys):
    from transduce.cli import main

    counts = {}
    for name in (rnn, transformer):
        main(["params", "--preset", name, "--vocab-size", str(vocab)])
        counts[name] = int(capsys.readouterr().out.splitlines()[-1])
    assert abs(counts[rnn] / counts[transformer] - 1) < 0.05, counts


# --- training: the loop, the plateau schedule, resume, search ----------------------------------

LEARNER = {
    "model.n_layers": 1,
    "model.d_model": 64,
    "model.d_embed": 64,
    "model.dropout": 0.0,
    "data.max_tokens": 400,
    "train.lr": 5e-3,
    "train.valid_every": 100,
    "train.keep_last": 2,
    "train.average_last": 2,
    "train.valid_bleu": False,
}


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("toy-rnn")
    data = prepare(
        reverse_task_files(folder),
        folder / "data",
        vocab_size=16,
        length_filter=LengthFilter(),
        description={"corpus": "toy"},
    )
    return data.path


@pytest.mark.slow  # 600 updates: about 25 s of CPU
def test_rnn_tiny_learns_to_reverse_and_translates_with_beam_search(toy_data, tmp_path):
    config = override(preset("rnn-tiny"), LEARNER | {"train.max_steps": 600})
    train(config, toy_data, tmp_path / "run", device="cpu")
    test = PreparedData.load(toy_data).text("test")
    translator = Translator.load(tmp_path / "run", device="cpu")  # average.pt, beam 4
    outputs = [h[0][0] for h in translator.translate(test.src)]
    exact = sum(o == t for o, t in zip(outputs, test.tgt, strict=True)) / len(outputs)
    assert exact >= 0.8, list(zip(outputs, test.tgt, strict=True))[:5]
    n_best = translator.translate(test.src[:3], DecodeConfig(beam_size=4, n_best=3))
    for hypotheses in n_best:
        scores = [score for _, score in hypotheses]
        assert len({text for text, _ in hypotheses}) == 3 and scores == sorted(scores)[::-1]


# Scripted dev losses by step: with patience 1 the rate halves at 20 and again at 40.
DEV_LOSSES = {10: 3.0, 20: 3.5, 30: 2.0, 40: 2.5}
PLUMBING = {
    "model.n_layers": 1,
    "model.d_model": 16,
    "model.d_embed": 16,
    "model.dropout": 0.3,  # the random state must be restored too
    "data.max_tokens": 300,
    "train.plateau_patience": 1,
    "train.valid_every": 10,
    "train.log_every": 5,
    "train.keep_last": 3,
    "train.average_last": 2,
    "train.valid_bleu": False,
}


def _trainer_with_scripted_dev_loss(config, data, run_dir, monkeypatch, resume=False):
    trainer = Trainer(config, PreparedData.load(data), run_dir, resume, torch.device("cpu"))

    def dev_loss(*args):
        loss = DEV_LOSSES[trainer.progress.step]
        return {"loss": loss, "nll": loss, "ppl": math.exp(loss)}

    monkeypatch.setattr(validation, "dev_loss", dev_loss)
    return trainer


def test_the_plateau_schedule_halves_and_a_resumed_run_ends_as_an_uninterrupted_one(
    toy_data, tmp_path, monkeypatch
):
    config = override(preset("rnn-tiny"), PLUMBING | {"train.max_steps": 40})
    stopped = override(config, {"train.max_steps": 20})
    for settings, run in [(config, "straight"), (stopped, "cut")]:
        _trainer_with_scripted_dev_loss(settings, toy_data, tmp_path / run, monkeypatch).run()
    _trainer_with_scripted_dev_loss(config, toy_data, tmp_path / "cut", monkeypatch, True).run()
    rates = {r["step"]: r["lr"] for r in read_log(tmp_path / "cut" / "log.jsonl") if "lr" in r}
    lr = config.train.lr
    assert rates == {5: lr, 10: lr, 15: lr, 20: lr, 25: lr / 2, 30: lr / 2, 35: lr / 2, 40: lr / 2}
    straight = load(CheckpointStore(tmp_path / "straight", 3).path(40))
    resumed = load(CheckpointStore(tmp_path / "cut", 3).path(40))
    assert straight["schedule"] == resumed["schedule"] == {"lr": lr / 4, "best": 2.0, "bad": 0}
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name  # bitwise on a CPU
