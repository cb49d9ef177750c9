"""Decoding (s6.1): greedy and beam search, and translating text with a saved model."""
