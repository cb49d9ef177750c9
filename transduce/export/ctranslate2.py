"""Export to CTranslate2, through the Hugging Face export and CTranslate2's own converter."""

from __future__ import annotations

import logging
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .hf import HF_ARCHITECTURES, check_replaceable, export_hf

logger = logging.getLogger(__name__)


def export_ctranslate2(
    model: Path, out: Path, checkpoint: Path | None = None, quantize: str | None = None
) -> Path:
    """Through the Hugging Face export, CTranslate2's converter; `quantize` e.g. "int8"."""
    import ctranslate2

    # The converter deletes `out` first (`force`): only an earlier conversion may be there.
    check_replaceable(out, ("model.bin", "vocab.model"), "CTranslate2")
    with tempfile.TemporaryDirectory() as hf_dir, _our_conventions():
        export_hf(model, Path(hf_dir), checkpoint)
        converter = ctranslate2.converters.TransformersConverter(hf_dir)
        converter.convert(str(out), quantization=quantize, force=True)
        shutil.copyfile(Path(hf_dir) / "source.spm", Path(out) / "vocab.model")
    logger.info("exported %s to %s (CTranslate2, %s)", model, out, quantize or "float32")
    return Path(out)


@contextmanager
def _our_conventions():
    """CTranslate2's Marian and Pegasus loaders, told that our decoder starts from BOS.

    Its Marian loader assumes the Marian toolkit's conventions: the decoder starts from a zero
    vector and <pad> is the last token, which it removes; its Pegasus loader starts the decoder
    from <pad>. Ours starts from the BOS embedding and keeps every token, so for the length of
    one conversion loaders that say so take their place.
    """
    from ctranslate2.converters import transformers as ct2_transformers

    class OurLoader(ct2_transformers.BartLoader):
        def __init__(self, architecture: str, pre_norm: bool):
            super().__init__()
            self._architecture, self._pre_norm = architecture, pre_norm

        @property
        def architecture_name(self):
            return self._architecture

        def get_model_spec(self, model):
            model.config.normalize_before = self._pre_norm
            model.config.normalize_embedding = False
            return super().get_model_spec(model)

        def set_config(self, config, model, tokenizer):
            super().set_config(config, model, tokenizer)
            config.bos_token = tokenizer.convert_ids_to_tokens(model.config.bos_token_id)

    registry = ct2_transformers._MODEL_LOADERS
    originals = {
        config_class: registry[config_class] for config_class, _ in HF_ARCHITECTURES.values()
    }
    for pre_norm, (config_class, model_class) in HF_ARCHITECTURES.items():
        registry[config_class] = OurLoader(model_class, pre_norm)
    try:
        yield
    finally:
        registry.update(originals)
