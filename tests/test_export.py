"""Exports reproduce our translations: Hugging Face `generate`, and CTranslate2; a stand-in for
CTranslate2 pins what its converter is handed, so that much is checked where it is not installed."""

import json
import shutil
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch

from transduce.config import DecodeConfig, override
from transduce.data.corpus import LengthFilter
from transduce.data.dataset import prepare
from transduce.decoding.search import greedy_search
from transduce.decoding.translate import Translator
from transduce.export import ExportError, export_ctranslate2, export_hf
from transduce.presets import preset, tiny
from transduce.training.loop import train

from .conftest import LEARNER_MODEL, reverse_task_files, save_toy_model

transformers = pytest.importorskip("transformers")
LINES = ["a b c d", "h g", "e e f a b c", "d"]


@pytest.fixture(
    scope="module", params=[(False, 0), (True, 1)], ids=["post-norm", "pre-norm-1-decoder-layer"]
)
def run_dir(request, tmp_path_factory):
    """A toy model trained until its translations end with EOS; post-norm (exported as
    Marian), and pre-norm (exported as Pegasus) with a decoder shallower than its encoder."""
    pre_norm, n_decoder_layers = request.param
    folder = tmp_path_factory.mktemp("export")
    data = prepare(
        reverse_task_files(folder),
        folder / "data",
        vocab_size=16,
        length_filter=LengthFilter(),
        description={"corpus": "toy"},
    )
    settings = LEARNER_MODEL | {
        "model.pre_norm": pre_norm,
        "model.n_decoder_layers": n_decoder_layers,
        "train.max_steps": 250,
        "train.valid_every": 250,
        "train.keep_last": 1,
        "train.average_last": 1,
        "train.valid_bleu": False,
    }
    train(override(tiny(), settings), data.path, folder / "run", device="cpu")
    return folder / "run"


def _sources(translator):
    ids = [[*row, translator.vocab.eos] for row in translator.vocab.encode(LINES)]
    width = max(map(len, ids))
    return torch.tensor([row + [translator.vocab.pad] * (width - len(row)) for row in ids])


@pytest.mark.slow  # trains two toy models for 250 updates each
def test_hugging_face_model_computes_our_function_and_greedy_translations(run_dir, tmp_path):
    ours = Translator.load(run_dir, device="cpu")  # beside a CPU reference
    theirs = transformers.AutoModelForSeq2SeqLM.from_pretrained(export_hf(run_dir, tmp_path / "hf"))
    expected = "PegasusForConditional" if ours.model.config.pre_norm else "MarianMT"
    assert type(theirs).__name__.startswith(expected)
    src = _sources(ours)
    tgt = torch.tensor([[2, 5, 6, 7]] * len(LINES))
    with torch.no_grad():
        mask = (src != ours.vocab.pad).long()
        hf_logits = theirs.eval()(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        torch.testing.assert_close(hf_logits, ours.model(src, tgt), rtol=1e-4, atol=1e-4)
        generated = theirs.generate(
            input_ids=src, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=20
        )
        hf_tokens = [[t for t in row.tolist()[1:] if t not in (0, 3)] for row in generated]
        v = ours.vocab
        assert hf_tokens == greedy_search(ours.model, src, bos=v.bos, eos=v.eos, pad=v.pad)
        # No n pieces twice (n = 1: no piece, a word's "▁" one), as Hugging Face rules them out.
        for n in (1, 2, 3):
            unrepeated = greedy_search(ours.model, src, bos=v.bos, eos=v.eos, pad=v.pad,
                                       no_repeat_ngram=n)  # fmt: skip
            assert n > 1 or unrepeated != hf_tokens  # the rule has work to do
            generated = theirs.generate(input_ids=src, attention_mask=mask, num_beams=1,
                                        do_sample=False, max_new_tokens=20,
                                        no_repeat_ngram_size=n)  # fmt: skip
            theirs_unrepeated = [
                [t for t in row.tolist()[1:] if t not in (0, 3)] for row in generated
            ]
            assert theirs_unrepeated == unrepeated, n


@pytest.mark.slow
def test_ctranslate2_reproduces_our_beam_search(run_dir, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    ours = Translator.load(run_dir, device="cpu")  # beside a CPU reference
    expected = [h[0][0] for h in ours.translate(LINES, DecodeConfig(beam_size=4, alpha=0.0))]
    pieces = [[*ours.vocab.pieces(ids), "</s>"] for ids in ours.vocab.encode(LINES)]

    def translated(folder, compute_type="default", beam=4, no_repeat_ngram=0):
        translator = ctranslate2.Translator(
            str(folder), device="cpu", intra_threads=1, compute_type=compute_type
        )
        results = translator.translate_batch(pieces, beam_size=beam, length_penalty=0.0,
                                             no_repeat_ngram_size=no_repeat_ngram)  # fmt: skip
        return ours.vocab.decode([ours.vocab.piece_ids(r.hypotheses[0]) for r in results])

    loaders = dict(ctranslate2.converters.transformers._MODEL_LOADERS)
    float32 = export_ctranslate2(run_dir, tmp_path / "ct2")
    assert loaders == ctranslate2.converters.transformers._MODEL_LOADERS  # ours for one conversion
    assert translated(float32) == expected
    # No n pieces twice, as CTranslate2 rules them out (greedy: its beam prunes otherwise).
    for n in (1, 2, 3):
        unrepeated = DecodeConfig(beam_size=1, alpha=0.0, no_repeat_ngram=n)
        unrepeated = [h[0][0] for h in ours.translate(LINES, unrepeated)]
        assert n > 1 or unrepeated != expected  # the rule has work to do
        assert translated(float32, "default", 1, n) == unrepeated, n
    assert (float32 / "vocab.model").read_bytes() == ours.vocab.serialized  # the tokenizer
    int8 = export_ctranslate2(run_dir, tmp_path / "ct2-int8", quantize="int8")
    size = lambda folder: (folder / "model.bin").stat().st_size  # noqa: E731
    assert size(int8) < 0.75 * size(float32)  # the weights were quantized (0.62 here)
    # The exported int8 weights, multiplied in float32: close, and on this easy task the same.
    outputs = translated(int8, compute_type="float32")
    assert sum(o == e for o, e in zip(outputs, expected, strict=True)) >= len(LINES) - 1
    # CTranslate2's own int8 products run them; on a CPU with AVX2 alone they lose this
    # d_model-16 toy's translations (on `small` they cost nothing: SPEED.md), so only that
    # they run is asserted.
    assert all(translated(int8, compute_type="int8"))


def test_a_model_without_an_equivalent_is_refused_with_the_reason():
    from transduce.export.hf import _exportable
    from transduce.models.saved import SavedModel

    def refused(settings: dict, reason: str) -> None:
        config = override(tiny(), settings)
        saved = SavedModel(model=None, config=config, vocab=None, path=Path("x.pt"), step=None)
        with pytest.raises(ExportError, match=reason):
            _exportable(saved)

    refused({"model.positions": "learned", "model.d_k": 16}, r"learned positions.*d_k or d_v")
    refused({"model.positions": "learned"}, r"to PegasusForConditionalGeneration: learned")
    refused({"model.tie_output": False}, "untied embeddings")
    refused({"model.share_embeddings": False}, "untied embeddings")
    refused({"model.d_v": 16}, "d_k or d_v")
    refused({"model.pre_norm": False, "model.d_k": 16}, "to MarianMTModel")  # tiny is pre-norm


def test_the_export_keeps_our_length_limit_and_every_weight(tmp_path, monkeypatch):
    """Positions and generation run to our `max_positions`, ending with EOS there; a weight
    that does not map onto the Hugging Face model is an error, not a random initialization."""
    from transduce.export import hf

    model = save_toy_model(tmp_path)
    out = export_hf(model, tmp_path / "hf")
    settings = json.loads((out / "config.json").read_text())
    generation = json.loads((out / "generation_config.json").read_text())
    limit = tiny().model.max_positions
    assert settings["max_position_embeddings"] == limit and generation["max_length"] == limit
    assert generation["forced_eos_token_id"] == generation["eos_token_id"] == 3
    tokenizer = json.loads((out / "tokenizer_config.json").read_text())
    assert tokenizer["model_max_length"] == limit  # the tokenizer cuts where the model must
    real = hf.hf_weights
    monkeypatch.setattr(hf, "hf_weights", lambda *args: {
        name: w for name, w in real(*args).items() if name != "model.encoder.layers.0.fc1.bias"
    })  # fmt: skip
    with pytest.raises(ExportError, match=r"missing \['model.encoder.layers.0.fc1.bias'\]"):
        export_hf(model, tmp_path / "hf2")


def test_a_recurrent_model_is_refused_with_the_reason():
    from transduce.export.hf import _exportable
    from transduce.models.saved import SavedModel

    saved = SavedModel(
        model=None, config=preset("rnn-tiny"), vocab=None, path=Path("x.pt"), step=None
    )
    with pytest.raises(ExportError, match=r"family 'rnn'.*hold the Transformer only"):
        _exportable(saved)


class _BartLoader:
    """CTranslate2's loader of BART, as far as ours relies on it."""

    @property
    def architecture_name(self):
        return "BartForConditionalGeneration"

    def get_model_spec(self, model):
        config = model.config
        return SimpleNamespace(
            pre_norm=config.normalize_before,
            layernorm_embedding=getattr(config, "normalize_embedding", True),
        )

    def set_config(self, config, model, tokenizer):
        config.bos_token, config.eos_token = tokenizer.bos_token, tokenizer.eos_token


@pytest.fixture
def fake_ctranslate2(monkeypatch):
    """CTranslate2 replaced by its converter's interface: the converter records each call, with
    the files it was given and the loaders in place while it ran; export_hf writes a tokenizer."""
    from transduce.export import ctranslate2 as ours

    originals = {"MarianConfig": "marian", "PegasusConfig": "pegasus", "BartConfig": "bart"}
    registry, calls = dict(originals), []

    class Converter:
        def __init__(self, model_name_or_path):
            self.path = Path(model_name_or_path)

        def convert(self, output_dir, vmap=None, quantization=None, force=False):
            if Path(output_dir).exists() and not force:
                raise RuntimeError(f"output directory {output_dir} already exists")
            files = {p.name: p.read_bytes() for p in self.path.iterdir()}
            calls.append(
                SimpleNamespace(
                    path=self.path,
                    files=files,
                    out=output_dir,
                    quantization=quantization,
                    loaders=dict(registry),
                )
            )
            if force and Path(output_dir).exists():
                shutil.rmtree(output_dir)  # as CTranslate2's converter does
            Path(output_dir).mkdir(parents=True)
            (Path(output_dir) / "model.bin").write_bytes(b"weights")
            return output_dir

    def export_hf(model, out, checkpoint=None):
        calls.append(SimpleNamespace(exported=(model, out, checkpoint)))
        (out / "source.spm").write_bytes(b"our sentencepiece model")
        return out

    transformers = ModuleType("ctranslate2.converters.transformers")
    transformers.BartLoader, transformers._MODEL_LOADERS = _BartLoader, registry
    converters = ModuleType("ctranslate2.converters")
    converters.TransformersConverter, converters.transformers = Converter, transformers
    package = ModuleType("ctranslate2")
    package.converters = converters
    for module in (package, converters, transformers):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(ours, "export_hf", export_hf)
    return SimpleNamespace(calls=calls, registry=registry, originals=originals)


def test_ctranslate2_converts_that_checkpoints_export_as_asked_and_keeps_its_tokenizer(
    fake_ctranslate2, tmp_path
):
    model, out, checkpoint = tmp_path / "run", tmp_path / "ct2", tmp_path / "run" / "step_5.pt"
    assert export_ctranslate2(model, out, checkpoint, quantize="int8") == out
    exported, converted = fake_ctranslate2.calls
    assert exported.exported == (model, converted.path, checkpoint)  # that checkpoint, exported
    assert converted.files["source.spm"] == b"our sentencepiece model"  # converted from there
    assert (converted.out, converted.quantization) == (str(out), "int8")
    assert (out / "vocab.model").read_bytes() == b"our sentencepiece model"  # the tokenizer
    assert not converted.path.exists()  # the Hugging Face export was temporary
    # A second export to the same folder replaces the first; unquantized by default.
    export_ctranslate2(model, out)
    assert fake_ctranslate2.calls[-1].quantization is None


def test_for_one_conversion_marian_and_pegasus_load_as_our_models_that_start_from_bos(
    fake_ctranslate2, tmp_path
):
    export_ctranslate2(tmp_path / "run", tmp_path / "ct2")
    loaders = fake_ctranslate2.calls[-1].loaders
    assert fake_ctranslate2.registry == fake_ctranslate2.originals  # theirs again, afterwards
    assert loaders["BartConfig"] == "bart"
    tokens = {0: "<pad>", 2: "<s>", 3: "</s>"}
    tokenizer = SimpleNamespace(bos_token=None, eos_token="</s>", convert_ids_to_tokens=tokens.get)
    for config_class, architecture, pre_norm in [
        ("MarianConfig", "MarianMTModel", False),
        ("PegasusConfig", "PegasusForConditionalGeneration", True),
    ]:
        loader = loaders[config_class]
        assert loader.architecture_name == architecture
        model = SimpleNamespace(config=SimpleNamespace(bos_token_id=2, eos_token_id=3))
        spec = loader.get_model_spec(model)
        assert (spec.pre_norm, spec.layernorm_embedding) == (pre_norm, False), architecture
        config = SimpleNamespace()
        loader.set_config(config, model, tokenizer)
        assert (config.bos_token, config.eos_token) == ("<s>", "</s>"), architecture


def test_a_failed_conversion_leaves_ctranslate2s_own_loaders_in_place(
    fake_ctranslate2, tmp_path, monkeypatch
):
    from transduce.export import ctranslate2 as ours

    def failing(*given):
        raise ExportError("no equivalent")

    monkeypatch.setattr(ours, "export_hf", failing)
    with pytest.raises(ExportError, match="no equivalent"):
        export_ctranslate2(tmp_path / "run", tmp_path / "ct2")
    assert fake_ctranslate2.registry == fake_ctranslate2.originals


def test_an_export_never_replaces_a_folder_of_other_files(fake_ctranslate2, tmp_path):
    """CTranslate2's converter deletes its output folder first, and Hugging Face's writes over
    files of its names: either export goes to a new or empty folder, or over its own kind."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (mine / "config.json").write_text("{}")
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    for export in (export_ctranslate2, export_hf):
        with pytest.raises(ExportError, match=r"not a .* export, which the export would replace"):
            export(tmp_path / "run", mine)
        with pytest.raises(ExportError, match="is a file"):
            export(tmp_path / "run", a_file)
    assert len(fake_ctranslate2.calls) == 0  # refused before any work
    assert (mine / "thesis.tex").read_text() == "years of work"
    assert (mine / "config.json").read_text() == "{}"
    # An earlier Hugging Face export may be exported over: the model is loaded (here, missing).
    earlier = tmp_path / "hf"
    earlier.mkdir()
    for name in ("config.json", "model.safetensors", "source.spm"):
        (earlier / name).write_text("")
    with pytest.raises(FileNotFoundError):
        export_hf(tmp_path / "run", earlier)


def test_an_untrained_export_computes_our_function_from_bos(tmp_path):
    # guards: a weight mapped or scaled wrongly, or generation not starting from BOS (fast check)
    path = save_toy_model(tmp_path)
    ours = Translator.load(path, device="cpu")
    theirs = transformers.AutoModelForSeq2SeqLM.from_pretrained(export_hf(path, tmp_path / "hf"))
    src = _sources(ours)
    tgt = torch.tensor([[ours.vocab.bos, 5, 6, 7]] * len(LINES))
    with torch.no_grad():
        mask = (src != ours.vocab.pad).long()
        hf_logits = theirs.eval()(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        torch.testing.assert_close(hf_logits, ours.model(src, tgt), rtol=1e-4, atol=1e-4)
        generated = theirs.generate(input_ids=src, attention_mask=mask, max_new_tokens=2)
    assert generated[:, 0].tolist() == [ours.vocab.bos] * len(LINES)
