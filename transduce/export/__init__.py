"""Taking a model elsewhere: Hugging Face (hf.py) and CTranslate2 (ctranslate2.py)."""

from .ctranslate2 import export_ctranslate2
from .hf import ExportError, export_hf

__all__ = ["ExportError", "export_ctranslate2", "export_hf"]
