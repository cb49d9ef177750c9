import torch

from transduce.config import DecodeConfig
from transduce.decoding.translate import decode_ids, quantized

from .conftest import tiny_model


class FakeVocab:
    pad, unk, bos, eos = 0, 1, 2, 3


def test_learned_positions_cap_the_output_length_instead_of_crashing():
    model = tiny_model(positions="learned", max_positions=6)
    sources = [[4, 5, 6, 7]]  # within the table; + 50 would not be
    hyps = decode_ids(model, FakeVocab(), sources, DecodeConfig(beam_size=2), torch.device("cpu"))
    assert len(hyps[0][0].tokens) + 1 <= 6


def test_results_come_back_in_input_order_whatever_the_batching():
    model = tiny_model(1)
    sources = [[4, 5, 6, 7, 8], [9], [10, 11], [4, 4, 4, 4, 4, 4, 4]]
    one_by_one = [
        decode_ids(model, FakeVocab(), [s], DecodeConfig(), torch.device("cpu"))[0][0].tokens
        for s in sources
    ]
    batched = decode_ids(
        model, FakeVocab(), sources, DecodeConfig(batch_size=3), torch.device("cpu")
    )
    assert [h[0].tokens for h in batched] == one_by_one


def test_int8_replaces_every_linear_layer_and_stays_close_to_float32():
    model = tiny_model(dtype=torch.float32, d_model=64, d_ff=128, h=4, d_k=16, d_v=16)
    int8 = quantized(model)
    dynamic_linear = torch.ao.nn.quantized.dynamic.Linear
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert n_linear == 2 * (4 + 2) + 2 * (8 + 2)  # per layer: attention maps, FFN
    assert sum(type(m) is dynamic_linear for m in int8.modules()) == n_linear
    assert not any(isinstance(m, torch.nn.Linear) for m in int8.modules())
    assert all(type(m) is not torch.nn.Linear for m in model.modules())  # the float model is kept
    src, tgt = torch.tensor([[4, 5, 6, 7, 3]]), torch.tensor([[2, 8, 9, 10]])
    with torch.no_grad():
        exact, approx = model(src, tgt), int8(src, tgt)
    assert torch.allclose(model.tgt_embed.tokens.weight, int8.tgt_embed.tokens.weight)
    assert (approx - exact).abs().max() < 0.05 * exact.std()
