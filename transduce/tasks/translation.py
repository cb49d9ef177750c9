"""Machine translation (s6.1): output text as decoded, scored by sacreBLEU's BLEU.

Raw text is scored with sacreBLEU's defaults (cased, 13a tokenization, the number to compare
across papers; characters or sacreBLEU's zh tokenizer for languages written without spaces,
`raw_tokenizer`); pre-tokenized, lowercased corpora as results published on them are, lowercased on
their own tokens (multi-bleu.perl's number).
"""

from __future__ import annotations

from ..config import DecodeConfig, TaskConfig
from ..data.dataset import PreparedData
from .metrics import Score, bleu, chrf


class Translation:
    metric = "bleu"
    higher_is_better = True

    def __init__(self, config: TaskConfig):
        self.config = config

    def decode_defaults(self) -> DecodeConfig:
        """Beam 4, length penalty 0.6, at most input length + 50 tokens (s6.1)."""
        return DecodeConfig(beam_size=4, alpha=0.6, max_len_a=1.0, max_len_b=50)

    def postprocess(self, outputs: list[str], sources: list[str]) -> list[str]:
        return outputs  # sentencepiece's decoding already restored the text

    def targets(self, outputs: list[str], sources: list[str]) -> list[str]:
        return outputs  # the model writes translations as they are

    def references(self, data: PreparedData, split: str) -> list[str]:
        return data.text(split).tgt

    def score(self, hypotheses: list[str], references: list[str]) -> Score:
        return bleu(
            hypotheses,
            references,
            tokenize=self.config.tokenize,
            lowercase=self.config.lowercase,
        )

    def report(self, hypotheses: list[str], references: list[str]) -> list[Score]:
        return [self.score(hypotheses, references), chrf(hypotheses, references)]


def scoring(tokenized: bool, target: str | None = None) -> TaskConfig:
    """The translation task for text that is (or is not) lowercased and tokenized already, into
    the language `target` (ISO 639-1, e.g. "de"; None: not known)."""
    if tokenized:
        return TaskConfig(tokenize="none", lowercase=True)
    return TaskConfig(tokenize=raw_tokenizer(target))


# Languages written without spaces between words, whose raw text 13a would leave one "word" a
# sentence (BLEU 0 for any output not exact): sacreBLEU's Chinese tokenizer (each ideograph a
# word) for Chinese, characters for the others (Japanese without MeCab: character BLEU).
# ISO 639-1 codes and the 639-3 ones (Mandarin, Cantonese, Wu: Chinese characters).
UNSPACED_LANGUAGES = {
    **dict.fromkeys(("zh", "zho", "cmn", "yue", "wuu"), "zh"),
    **dict.fromkeys(("ja", "jpn", "th", "tha", "lo", "lao", "km", "khm", "my", "mya", "bo",
                     "bod"), "char"),
}  # fmt: skip


def base_language(code: str | None) -> str:
    """A language code's language, lowercased: "zh-Hant", "ja_JP", "JA" -> "zh", "ja", "ja"."""
    return (code or "").replace("_", "-").split("-")[0].lower()


def raw_tokenizer(target: str | None) -> str:
    """sacreBLEU's tokenizer for raw text in the language `target`: 13a but for the languages
    written without spaces (UNSPACED_LANGUAGES, by `base_language`)."""
    return UNSPACED_LANGUAGES.get(base_language(target), "13a")


def is_tokenized(task: TaskConfig) -> bool:
    """Whether the task's text is pre-tokenized (scored on its own tokens): every word stands
    between spaces, in any script, Japanese and Chinese too."""
    return task.tokenize == "none"


def writes_running_text(task: TaskConfig) -> bool:
    """Whether the task's outputs are running text of a script without spaces (scored on
    characters, `UNSPACED_LANGUAGES`): a Latin word inside it comes without a space before it
    ("新しいiPhoneを"), so every term is followed by its characters (`decoding/spelling.py`)."""
    return task.tokenize in set(UNSPACED_LANGUAGES.values())


TRANSLATION = scoring(tokenized=False)  # raw text, scored by sacreBLEU's defaults
