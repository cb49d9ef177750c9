"""Export a trained model as a Hugging Face model folder (ctranslate2.py converts it on).

A post-norm model becomes a `MarianMTModel`: the paper's architecture (post-norm, scaled and
tied embeddings, sinusoids). A pre-norm one becomes a `PegasusForConditionalGeneration`: the
same with each LayerNorm before its sublayer and a final LayerNorm closing each stack, as ours.
Both differ from s3.5 in one layout: their positional encoding puts the sines in the first half
of the d_model dimensions and the cosines in the second, where the paper interleaves them.
Every layer is equivariant to a permutation of the d_model dimensions applied to all its
weights, so permuting them all gives a model with exactly our function.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from torch import Tensor

from ..config import TransformerConfig
from ..data.bpe import Vocab
from ..models.saved import SavedModel, load_model

logger = logging.getLogger(__name__)


class ExportError(ValueError):
    """This model cannot be expressed in the target format, or not written where asked; the
    message says why."""


def check_replaceable(out: Path, markers: tuple[str, ...], kind: str) -> None:
    """An export writes a whole folder: a new or empty one, or an earlier export of the same
    kind (the files `markers`), which it replaces; never a folder of other files."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file; --out names the folder to write")
    if out.is_dir() and any(out.iterdir()) and not all((out / m).exists() for m in markers):
        raise ExportError(
            f"{out} holds files that are not a {kind} export, which the export would replace: "
            "name a new or empty folder"
        )


def export_hf(model: Path, out: Path, checkpoint: Path | None = None) -> Path:
    """Write `out/` with config.json, model.safetensors and the tokenizer's files.

    `model` is a run folder or a checkpoint file. MarianMTModel for a post-norm model,
    PegasusForConditionalGeneration for a pre-norm one.
    """
    import transformers

    check_replaceable(out, HF_EXPORT_FILES, "Hugging Face")
    saved = load_model(model, checkpoint)
    config, vocab = _exportable(saved), saved.vocab
    config_class, model_class = HF_ARCHITECTURES[config.pre_norm]
    settings = getattr(transformers, config_class)(**hf_settings(config, vocab))
    hf_model = getattr(transformers, model_class)(settings)
    weights = hf_weights(saved.model.state_dict(), config)
    missing, unexpected = hf_model.load_state_dict(weights, strict=False)
    # The model computes its sinusoid table itself; nothing else may be left over.
    missing = [k for k in missing if "embed_positions" not in k]
    if missing or unexpected:
        raise ExportError(
            f"weights did not map onto {model_class}: missing {missing}, extra {unexpected}"
        )
    hf_model.generation_config.max_length = config.max_positions
    hf_model.save_pretrained(out)
    _write_tokenizer_files(vocab, Path(out), config.max_positions)
    logger.info("exported %s to %s (Hugging Face %s)", saved.path, out, model_class)
    return Path(out)


# Files every Hugging Face export of ours holds: a folder with them may be exported over.
HF_EXPORT_FILES = ("config.json", "model.safetensors", "source.spm")

# The Hugging Face (config, model) classes that compute our function, by `model.pre_norm`.
HF_ARCHITECTURES = {
    False: ("MarianConfig", "MarianMTModel"),
    True: ("PegasusConfig", "PegasusForConditionalGeneration"),
}


def hf_settings(config: TransformerConfig, vocab: Vocab) -> dict:
    return {
        "vocab_size": config.vocab_size,
        "d_model": config.d_model,
        "encoder_layers": config.n_layers,
        "decoder_layers": config.decoder_depth,
        "encoder_attention_heads": config.h,
        "decoder_attention_heads": config.h,
        "encoder_ffn_dim": config.d_ff,
        "decoder_ffn_dim": config.d_ff,
        "activation_function": "relu",  # eq. 2
        "scale_embedding": True,  # s3.4
        "max_position_embeddings": config.max_positions,
        "pad_token_id": vocab.pad,
        "eos_token_id": vocab.eos,
        "bos_token_id": vocab.bos,
        "decoder_start_token_id": vocab.bos,  # ours starts from BOS, Marian and Pegasus from pad
        "forced_eos_token_id": vocab.eos,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
        "dropout": 0.0,
    }


def hf_weights(ours: dict[str, Tensor], config: TransformerConfig) -> dict[str, Tensor]:
    """Our state dict under Marian's (Pegasus's) names, each d_model axis permuted to their
    sin|cos layout. The names are the same in both; in a pre-norm model each `*_layer_norm`
    is the one before its sublayer, and the stacks' final norms are `layer_norm`."""
    perm = torch.cat([torch.arange(0, config.d_model, 2), torch.arange(1, config.d_model, 2)])
    embedding = ours["src_embed.tokens.weight"][:, perm]
    out = {
        "model.shared.weight": embedding,
        "model.encoder.embed_tokens.weight": embedding,
        "model.decoder.embed_tokens.weight": embedding,
        "lm_head.weight": embedding,
        "final_logits_bias": torch.zeros(1, config.vocab_size),
    }
    for i in range(config.n_layers):
        ours_enc, enc = f"encoder_layers.{i}", f"model.encoder.layers.{i}"
        out |= _attention(ours, f"{ours_enc}.self_attn", f"{enc}.self_attn", perm)
        out |= _norm(
            ours, f"{ours_enc}.self_attn_residual.norm", f"{enc}.self_attn_layer_norm", perm
        )
        out |= _ffn(ours, f"{ours_enc}.ffn", enc, perm)
        out |= _norm(ours, f"{ours_enc}.ffn_residual.norm", f"{enc}.final_layer_norm", perm)
    for i in range(config.decoder_depth):
        ours_dec, dec = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        out |= _attention(ours, f"{ours_dec}.self_attn", f"{dec}.self_attn", perm)
        out |= _norm(
            ours, f"{ours_dec}.self_attn_residual.norm", f"{dec}.self_attn_layer_norm", perm
        )
        out |= _attention(ours, f"{ours_dec}.cross_attn", f"{dec}.encoder_attn", perm)
        out |= _norm(
            ours, f"{ours_dec}.cross_attn_residual.norm", f"{dec}.encoder_attn_layer_norm", perm
        )
        out |= _ffn(ours, f"{ours_dec}.ffn", dec, perm)
        out |= _norm(ours, f"{ours_dec}.ffn_residual.norm", f"{dec}.final_layer_norm", perm)
    if config.pre_norm:
        out |= _norm(ours, "encoder_norm", "model.encoder.layer_norm", perm)
        out |= _norm(ours, "decoder_norm", "model.decoder.layer_norm", perm)
    return {name: tensor.contiguous() for name, tensor in out.items()}


def _attention(ours: dict, src: str, dst: str, perm: Tensor) -> dict:
    out = {}
    for mine, theirs in (("w_q", "q_proj"), ("w_k", "k_proj"), ("w_v", "v_proj")):
        out[f"{dst}.{theirs}.weight"] = ours[f"{src}.{mine}.weight"][:, perm]  # reads d_model
        out[f"{dst}.{theirs}.bias"] = ours[f"{src}.{mine}.bias"]
    out[f"{dst}.out_proj.weight"] = ours[f"{src}.w_o.weight"][perm, :]  # writes d_model
    out[f"{dst}.out_proj.bias"] = ours[f"{src}.w_o.bias"][perm]
    return out


def _ffn(ours: dict, src: str, dst: str, perm: Tensor) -> dict:
    return {
        f"{dst}.fc1.weight": ours[f"{src}.w_1.weight"][:, perm],
        f"{dst}.fc1.bias": ours[f"{src}.w_1.bias"],
        f"{dst}.fc2.weight": ours[f"{src}.w_2.weight"][perm, :],
        f"{dst}.fc2.bias": ours[f"{src}.w_2.bias"][perm],
    }


def _norm(ours: dict, src: str, dst: str, perm: Tensor) -> dict:
    return {f"{dst}.weight": ours[f"{src}.weight"][perm], f"{dst}.bias": ours[f"{src}.bias"][perm]}


def _exportable(saved: SavedModel) -> TransformerConfig:
    """The model's config if Marian or Pegasus can hold the model exactly, else why not."""
    config = saved.config.model
    if not isinstance(config, TransformerConfig):
        raise ExportError(
            f"cannot export a model of family {config.family!r}: Hugging Face's Marian and "
            "Pegasus (and CTranslate2 through them) hold the Transformer only"
        )
    family = HF_ARCHITECTURES[config.pre_norm][1]
    problems = []
    if config.positions != "sinusoidal":
        problems.append(f"learned positions ({family} has sinusoids)")
    if not (config.share_embeddings and config.tie_output):
        problems.append(f"untied embeddings ({family} shares them here)")
    if not config.d_k == config.d_v == config.d_model // config.h:
        problems.append("d_k or d_v other than d_model / h")
    if problems:
        raise ExportError(f"cannot export to {family}: " + "; ".join(problems))
    return config


def _write_tokenizer_files(vocab: Vocab, out: Path, max_length: int) -> None:
    """MarianTokenizer's files: the one joint model twice, its pieces by id, and the model's
    length limit (the tokenizer cuts a longer input there, not below what the model takes)."""
    (out / "source.spm").write_bytes(vocab.serialized)
    (out / "target.spm").write_bytes(vocab.serialized)
    pieces = {vocab.pieces([i])[0]: i for i in range(vocab.size)}
    (out / "vocab.json").write_text(json.dumps(pieces, ensure_ascii=False))
    settings = {
        "source_lang": None,
        "target_lang": None,
        "separate_vocabs": False,
        "model_max_length": max_length,
        "tokenizer_class": "MarianTokenizer",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))
