import torch

from transduce.config import DecodeConfig
from transduce.decoding.translate import decode_ids

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


def test_a_saved_runs_decoding_settings_reach_the_search(tmp_path, monkeypatch):
    """What a preset or `--set decode.*` chose (`tiny`'s alpha 1.0, say) is what translating the
    run searches with, unless the call names its own."""
    import transduce
    import transduce.decoding.translate as translate_module

    from .conftest import save_toy_model

    seen = []

    def recording_search(*args, **kwargs):
        seen.append((kwargs["beam_size"], kwargs["alpha"], kwargs["max_len_b"]))
        return search(*args, **kwargs)

    search = translate_module.beam_search
    monkeypatch.setattr(translate_module, "beam_search", recording_search)
    saved = save_toy_model(tmp_path, DecodeConfig(beam_size=3, alpha=1.0, max_len_b=7))
    translator = transduce.load(saved)
    translator.translate(["a b c"])
    translator.translate(["a b c"], DecodeConfig(beam_size=2))
    assert seen == [(3, 1.0, 7), (2, 0.6, 50)]
