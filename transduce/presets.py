"""The presets, written out in full: the paper's base, big and every Table 3 row (s6.2), the
small-data models `tiny` and `small` for CPUs, and the recurrent baseline at the size of Luong et
al. 2015 (`rnn`) and at the sizes of `tiny` and `small` (`rnn-tiny`, `rnn-small`). Each is a
function returning a whole Config."""

from __future__ import annotations

from .config import (
    Config,
    ConfigError,
    DataConfig,
    DecodeConfig,
    RnnConfig,
    TrainConfig,
    TransformerConfig,
    override,
)


def scale_for_peak(peak: float, d_model: int, warmup_steps: int) -> float:
    """The `train.lr_scale` at which eq. 3 peaks at `peak` (at step == warmup_steps)."""
    return peak / (d_model**-0.5 * warmup_steps**-0.5)


# The paper's batches (s5.1), each of one source length (but a length's last few sentences): on a
# GPU attention then goes without a mask (`training.loss.MASK_FREE_DEVICES`), `base` 1.16x and
# `big` 1.04x the masked update's speed on an H200 (measured in parts, SPEED.md, session 34).
# Table 3's rows batch as `base` does, so that they differ from it in their columns.
PAPER_BATCHES = DataConfig(max_tokens=25000, one_source_length=True)


def base() -> Config:
    """Transformer (base), Table 3: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1, eps_ls=0.1."""
    return Config(
        model=TransformerConfig(
            n_layers=6, d_model=512, d_ff=2048, h=8, d_k=64, d_v=64, dropout=0.1
        ),
        data=PAPER_BATCHES,
        train=TrainConfig(warmup_steps=4000, label_smoothing=0.1, max_steps=100000),
    )


def big() -> Config:
    """Transformer (big), Table 3: N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3, 300k steps."""
    return Config(
        model=TransformerConfig(
            n_layers=6, d_model=1024, d_ff=4096, h=16, d_k=64, d_v=64, dropout=0.3
        ),
        data=PAPER_BATCHES,
        train=TrainConfig(warmup_steps=4000, label_smoothing=0.1, max_steps=300000),
    )


def tiny() -> Config:
    """The Transformer-tiny of published Multi30k baselines (Wu et al. 2021), for a CPU.

    4 layers, d_model 128, 4 heads, d_ff 256, dropout 0.3, peak learning rate 0.005, a 10k joint
    BPE, and the average of the last 10 checkpoints. Pre-norm, unlike the paper: at this learning
    rate the post-norm stack learned 3x slower on a 2-core CPU (Multi30k en-de, dev perplexity
    23.8 at update 750 pre-norm, 23.7 at update 2,000 post-norm); `model.pre_norm=false` is s3's.

    Sized for an hour on a CPU rather than the published 2,000 warmup steps and a rate decaying
    to the end: the peak at update 800 (dev BLEU 35.5 at update 2,000 against 31.8), and the
    rate cooled linearly to 0 over the last 20% of the budget (test BLEU after 60 minutes 41.11
    against 40.62 without, the same run until the cooldown; RESULTS.md, run 5). Length penalty
    alpha 1.0, not s6.1's 0.6, for its short translations: +0.19 dev BLEU in both runs that
    swept it, and 1.4 no further (41.24/41.43/41.42, 40.76/40.95/41.01; RESULTS.md, run 7).
    """
    d_model, warmup, peak = 128, 800, 0.005
    return Config(
        model=TransformerConfig(
            n_layers=4, d_model=d_model, d_ff=256, h=4, d_k=32, d_v=32, dropout=0.3, pre_norm=True
        ),
        data=DataConfig(max_tokens=4096),
        train=TrainConfig(
            warmup_steps=warmup,
            lr_scale=scale_for_peak(peak, d_model, warmup),
            cooldown=0.2,
            label_smoothing=0.1,
            max_steps=20000,
            valid_every=125,  # about one epoch of Multi30k, so the last 10 are the last 10 epochs
            keep_last=10,
            average_last=10,
        ),
        decode=DecodeConfig(alpha=1.0),
    )


def demo() -> Config:
    """`tiny` with a schedule sized to the demo's 10 minutes, the first thing a user runs.

    On a 2-core CPU that trains `tiny` at ~1.2 updates/s, 10 minutes is ~800 updates, ~8 epochs of
    Multi30k: the published 2,000-update warmup was still climbing at the end, and `tiny`'s dropout,
    set for hours, only slows the first epochs. Test BLEU after 650-850 updates (DEMO.md): `tiny`
    14.9; the peak at update 200, 24.6; with dropout 0.1, 30.4; 0, 31.9. A faster host overfits
    without it (dev loss 2.186 at update 1,000, 2.306 at 1,424), so dropout 0.1 begins at update 800
    (`train.late_dropout`), which the 1.2-updates/s host never reaches: on an AMX Xeon test BLEU
    37.56 against 34.18 after ~1,500 updates (DEMO.md, session 50). Over 20 minutes: `tiny`.

    Length penalty alpha 1.4, not the paper's 0.6: a model this young writes short translations
    (brevity penalty 0.90 on dev at 0.6); dev BLEU after 720 updates 32.92 at 0.6, 33.59 at 1.4,
    33.61 at 1.8, 32.25 at 2.4 (DEMO.md). It keeps `tiny`'s cooldown over the last 20% (test BLEU
    33.52 at 720 updates against 33.03 without), after which the newest checkpoint is the final
    model, as for `small`: ahead of the average of the run's second half on dev in all three demos
    that measured both (+0.58 to +1.43; DEMO.md, sessions 15 and 26).
    """
    d_model, warmup, peak = 128, 200, 0.005
    return override(
        tiny(),
        {
            "model.dropout": 0.1,
            "train.late_dropout": 800,
            "train.warmup_steps": warmup,
            "train.lr_scale": scale_for_peak(peak, d_model, warmup),
            "decode.alpha": 1.4,
            "train.average_last": 1,
            "train.valid_every": 250,  # each one took 8-17 s of the ten minutes (DEMO.md, s39)
        },
    )


def small() -> Config:
    """3+3 layers, d_model 256, 4 heads, d_ff 1024, pre-norm, tied embeddings: the size of the
    speed comparison with the other toolkits (issue #3), trained for a short run on a CPU.

    The comparison's schedule (4,096-token batches, peak 1e-3 after 400 updates) reached dev
    BLEU 35 (greedy) on Multi30k en->de after 27 minutes on a 2-core CPU; this one is sized for
    about 15: half the batch (twice the updates for 1% fewer tokens a second), the peak at 2e-3
    after 200 updates, the rate cooled linearly to 0 over the last 30% of the budget, and the
    newest checkpoint as the final model: after a cooldown to 0 the average of the last 4 (one
    every 100 updates) was behind it in 6 of 9 such runs, by 0.26 BLEU on average
    (benchmarks/SPEED.md, "Time to quality"). Dropout 0.1, as the comparison had: 15 minutes
    of 2,048-token batches are 7-11 epochs of Multi30k on the hosts we measured, and without
    dropout the faster a host, the lower it ended (34.73, 34.08 and 33.75 dev BLEU after 1,279,
    1,755 and 2,033 updates); with it, 36.68 after 1,892 on the 2,033-update host, and 35.90
    against 34.47 without in a side-by-side pair there (session 19).
    """
    d_model, warmup, peak = 256, 200, 2e-3
    return Config(
        model=TransformerConfig(
            n_layers=3, d_model=d_model, d_ff=1024, h=4, d_k=64, d_v=64, dropout=0.1, pre_norm=True
        ),
        data=DataConfig(max_tokens=2048),
        train=TrainConfig(
            warmup_steps=warmup,
            lr_scale=scale_for_peak(peak, d_model, warmup),
            cooldown=0.3,
            label_smoothing=0.1,
            max_steps=40000,
            valid_every=100,
            keep_last=5,
            average_last=1,
        ),
    )


def rnn() -> Config:
    """Luong et al. 2015's WMT model: 4 layers of 1,000 LSTM units, 1,000-dimensional embeddings,
    input feeding, global attention, dropout 0.2, parameters U(-0.1, 0.1), gradient norm clipped
    at 5, no label smoothing; a unidirectional encoder, whose last states start the decoder.

    Adam at 1e-3, halved after 5 validations without a lower dev loss (the recipe of the
    toolkits' recurrent baselines; Luong et al. used SGD, halving the rate each epoch after 5).
    """
    return Config(
        model=RnnConfig(
            cell="lstm",
            n_layers=4,
            d_model=1000,
            d_embed=1000,
            bidirectional=False,
            score="general",
            input_feeding=True,
            decoder_init="bridge",
            dropout=0.2,
            share_embeddings=False,
            tie_output=False,
        ),
        data=DataConfig(max_tokens=4096),
        train=TrainConfig(
            schedule="plateau",
            lr=1e-3,
            plateau_factor=0.5,
            plateau_patience=5,
            warmup_steps=1,  # no warmup: every checkpoint may join the final average
            beta1=0.9,
            beta2=0.999,
            eps=1e-8,
            clip_norm=5.0,
            label_smoothing=0.0,
            max_steps=100000,
            valid_every=1000,
        ),
    )


def rnn_tiny() -> Config:
    """A bidirectional 1-layer LSTM encoder of 160 units per direction and a 1-layer decoder,
    with shared and tied embeddings: as many parameters as `tiny` (2.56M and 2.61M at a 10k
    vocabulary), trained like it (4,096-token batches, label smoothing 0.1, dropout 0.3, a
    validation and checkpoint per epoch of Multi30k, the average of the last 10) with the
    recurrent recipe: Adam at 1e-3 halved after 3 validations without a lower dev loss,
    gradients clipped at norm 5.

    One layer, not two: on Multi30k en->de the 2-layer LSTM of 136 units had barely begun to use
    the source after 500 updates (dev loss 6.09, and 5.63 against 5.79 nats with the sources
    shuffled) while one layer of 160 was at 5.54 and climbing (benchmarks/compare.md); sharing
    or untying the embeddings at the same size changed nothing (6.06-6.28).
    """
    return Config(
        model=RnnConfig(
            cell="lstm",
            n_layers=1,
            d_model=160,
            d_embed=160,
            bidirectional=True,
            score="general",
            input_feeding=True,
            decoder_init="bridge",
            dropout=0.3,
            share_embeddings=True,
            tie_output=True,
        ),
        data=DataConfig(max_tokens=4096),
        train=TrainConfig(
            schedule="plateau",
            lr=1e-3,
            plateau_factor=0.5,
            plateau_patience=3,
            warmup_steps=1,  # no warmup: every checkpoint may join the final average
            beta1=0.9,
            beta2=0.999,
            eps=1e-8,
            clip_norm=5.0,
            label_smoothing=0.1,
            max_steps=20000,
            valid_every=125,
            keep_last=10,
            average_last=10,
        ),
    )


def rnn_small() -> Config:
    """A bidirectional 2-layer LSTM of 280 units per direction with shared and tied embeddings:
    as many parameters as `small` (7.67M and 7.58M at an 8k vocabulary), with `rnn-tiny`'s recipe
    at dropout 0.2 (Luong et al.'s), in `small`'s 2,048-token batches (`compare` gives a pair the
    same batch budget) and a validation every 1,000 of them, so that the plateau's patience spans
    as many sentences as it did at 4,096 tokens and 500 updates.
    """
    return Config(
        model=RnnConfig(
            cell="lstm",
            n_layers=2,
            d_model=280,
            d_embed=280,
            bidirectional=True,
            score="general",
            input_feeding=True,
            decoder_init="bridge",
            dropout=0.2,
            share_embeddings=True,
            tie_output=True,
        ),
        data=DataConfig(max_tokens=2048),
        train=TrainConfig(
            schedule="plateau",
            lr=1e-3,
            plateau_factor=0.5,
            plateau_patience=3,
            warmup_steps=1,  # no warmup: every checkpoint may join the final average
            beta1=0.9,
            beta2=0.999,
            eps=1e-8,
            clip_norm=5.0,
            label_smoothing=0.1,
            max_steps=40000,
            valid_every=1000,
        ),
    )


# Table 3, written out row by row: (N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls, positions).
_TABLE3 = {
    ("A", 1): (6, 512, 2048, 1, 512, 512, 0.1, 0.1, "sinusoidal"),
    ("A", 2): (6, 512, 2048, 4, 128, 128, 0.1, 0.1, "sinusoidal"),
    ("A", 3): (6, 512, 2048, 16, 32, 32, 0.1, 0.1, "sinusoidal"),
    ("A", 4): (6, 512, 2048, 32, 16, 16, 0.1, 0.1, "sinusoidal"),
    ("B", 1): (6, 512, 2048, 8, 16, 64, 0.1, 0.1, "sinusoidal"),
    ("B", 2): (6, 512, 2048, 8, 32, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 1): (2, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 2): (4, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 3): (8, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 4): (6, 256, 2048, 8, 32, 32, 0.1, 0.1, "sinusoidal"),
    ("C", 5): (6, 1024, 2048, 8, 128, 128, 0.1, 0.1, "sinusoidal"),
    ("C", 6): (6, 512, 1024, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("C", 7): (6, 512, 4096, 8, 64, 64, 0.1, 0.1, "sinusoidal"),
    ("D", 1): (6, 512, 2048, 8, 64, 64, 0.0, 0.1, "sinusoidal"),
    ("D", 2): (6, 512, 2048, 8, 64, 64, 0.2, 0.1, "sinusoidal"),
    ("D", 3): (6, 512, 2048, 8, 64, 64, 0.1, 0.0, "sinusoidal"),
    ("D", 4): (6, 512, 2048, 8, 64, 64, 0.1, 0.2, "sinusoidal"),
    ("E", 1): (6, 512, 2048, 8, 64, 64, 0.1, 0.1, "learned"),
}

# The paper's parameter counts (x 10^6) for the rows that change size; base is 65, big 213.
TABLE3_PARAMS_M = {
    ("B", 1): 58,
    ("B", 2): 60,
    ("C", 1): 36,
    ("C", 2): 50,
    ("C", 3): 80,
    ("C", 4): 28,
    ("C", 5): 168,
    ("C", 6): 53,
    ("C", 7): 90,
}


def table3(row: str, index: int) -> Config:
    """A variant of Table 3, e.g. `table3("B", 1)`: base with the row's columns changed."""
    key = (row.upper(), index)
    if key not in _TABLE3:
        raise ConfigError(f"Table 3 has no row {row}{index}; rows: {sorted(_TABLE3)}")
    n, d_model, d_ff, h, d_k, d_v, p_drop, eps_ls, positions = _TABLE3[key]
    return Config(
        model=TransformerConfig(
            n_layers=n,
            d_model=d_model,
            d_ff=d_ff,
            h=h,
            d_k=d_k,
            d_v=d_v,
            dropout=p_drop,
            positions=positions,
        ),
        data=PAPER_BATCHES,
        train=TrainConfig(warmup_steps=4000, label_smoothing=eps_ls, max_steps=100000),
    )


def parse() -> Config:
    """The parser of s6.3: 4 layers, d_model 1024, the rest of the base model unchanged.

    "All other parameters remained unchanged from the English-to-German base translation
    model": 8 heads (so d_k = d_v = 128), d_ff 2048, P_drop 0.1, eps_ls 0.1. Decoding takes
    the task's s6.3 settings (beam 21, alpha 0.3, input + 300). As in the reference
    implementation's parsing setting, the softmax does not share the target embedding.
    """
    return Config(
        model=TransformerConfig(
            n_layers=4, d_model=1024, d_ff=2048, h=8, d_k=128, d_v=128, dropout=0.1,
            tie_output=False,
        ),
        data=DataConfig(max_tokens=25000),
        train=TrainConfig(warmup_steps=4000, label_smoothing=0.1, max_steps=100000),
    )  # fmt: skip


def parse_tiny() -> Config:
    """The parser sized for a CPU and the ~3,000 training trees of the NLTK sample.

    4 layers as the paper's parser, d_model 128, 4 heads, d_ff 512, untied softmax; pre-norm and
    dropout 0.3 as `tiny`, which learns faster this way on small data. A linearised tree is about
    twice as long as its sentence's subwords, so a CPU update costs several of `tiny`'s: the
    schedule peaks early (2e-3 after 400 updates) for runs of about a thousand updates.
    """
    d_model, warmup, peak = 128, 400, 2e-3
    return Config(
        model=TransformerConfig(
            n_layers=4, d_model=d_model, d_ff=512, h=4, d_k=32, d_v=32, dropout=0.3,
            pre_norm=True, tie_output=False,
        ),
        data=DataConfig(max_tokens=4096),
        train=TrainConfig(
            warmup_steps=warmup,
            lr_scale=scale_for_peak(peak, d_model, warmup),
            label_smoothing=0.1,
            max_steps=20000,
            valid_every=100,
            keep_last=5,
            average_last=5,
        ),
    )  # fmt: skip


PRESETS = {
    "base": base, "big": big, "tiny": tiny, "demo": demo, "small": small, "parse": parse,
    "parse-tiny": parse_tiny, "rnn": rnn, "rnn-tiny": rnn_tiny, "rnn-small": rnn_small,
}  # fmt: skip


def preset(name: str) -> Config:
    """A name of PRESETS (`base`, `big`, `tiny`, ...), or a Table 3 row like `B1` or `table3-B1`."""
    if name in PRESETS:
        return PRESETS[name]()
    row = name.removeprefix("table3-").removeprefix("table3_")
    if len(row) >= 2 and row[0].isalpha() and row[1:].isdigit():
        return table3(row[0], int(row[1:]))
    names = sorted(PRESETS) + [f"{r}{i}" for r, i in sorted(_TABLE3)]
    raise ConfigError(f"unknown preset {name!r}; choose from {', '.join(names)}")
