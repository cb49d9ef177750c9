"""The recurrent attention baseline the Transformer replaced (Luong et al. 2015; Bahdanau et al.
2015), on the same contract: encoder, decoder, the model, and its cache.

Encoder h_i = RNN(Emb(x_i), h_{i-1}), uni- or bidirectional, run on packed sequences so that
padding changes nothing. Decoder h'_j = RNN(Emb(y_{j-1}), h'_{j-1}); alpha_ij =
softmax_i(score(h_i, h'_j)); c_j = sum_i alpha_ij h_i; h~'_j = tanh(W_c [c_j; h'_j] + b_c);
y_j = softmax(W_o h~'_j + b_o). Input feeding (Luong s3.3) adds h~'_{j-1} to the decoder's input.
The additive score is wired as Bahdanau et al.: c_j is asked with the previous state h'_{j-1}
and joins the recurrent step's input, h'_j = RNN([Emb(y_{j-1}); c_j], h'_{j-1}).

`forward` trains, `encode` + `init_cache` + `step` decode one position at a time with the same
code run on a length-1 input, and `attention_maps` returns alpha.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..config import RnnConfig
from .cache import kept_sentences
from .contract import AttentionMaps, Encoded
from .dropout import Dropout
from .matmul import Linear, linear
from .rnn_attention import GlobalAttention


@dataclass
class RnnEncoded(Encoded):
    """The encoder's outputs h_i and each layer's last states, for the decoder's `bridge`."""

    final_hidden: Tensor | None = None  # (L, B, directions * d_model)
    final_cell: Tensor | None = None  # (L, B, directions * d_model); LSTM only


@dataclass
class RnnCache:
    """The decoder's state between steps: the recurrent state and h~'_{j-1} of each row, and the
    encoder's outputs with their keys once per sentence. `group` consecutive rows (the beams)
    belong to one sentence."""

    memory: Tensor  # (B, S, d_memory): h_i, one row per sentence
    keys: Tensor  # (B, S, d_k): the source's part of the score
    src_pad_mask: Tensor  # (B, S)
    hidden: Tensor  # (L, N, d_model): h'_j of every layer, one column per row
    cell: Tensor | None  # (L, N, d_model): the LSTM's memory cells; None for a GRU
    feed: Tensor | None  # (N, d_model): h~'_{j-1}, with input feeding
    group: int = 1

    @property
    def state(self) -> Tensor | tuple[Tensor, Tensor]:
        """The state as torch's LSTM (h, c) or GRU (h) takes and returns it."""
        return self.hidden if self.cell is None else (self.hidden, self.cell)

    @state.setter
    def state(self, value: Tensor | tuple[Tensor, Tensor]) -> None:
        self.hidden, self.cell = value if isinstance(value, tuple) else (value, None)

    def reorder(self, index: Tensor, group: int | None = None) -> None:
        """Keep rows `index` (N',), in that order (see contract.Cache)."""
        group = self.group if group is None else group
        sentences = kept_sentences(index, group, self.group, self.src_pad_mask.size(0))
        self.hidden = self.hidden.index_select(1, index)
        if self.cell is not None:
            self.cell = self.cell.index_select(1, index)
        if self.feed is not None:
            self.feed = self.feed.index_select(0, index)
        if sentences is not None:
            self.memory = self.memory.index_select(0, sentences)
            self.keys = self.keys.index_select(0, sentences)
            self.src_pad_mask = self.src_pad_mask.index_select(0, sentences)
        self.group = group


def _recurrent(config: RnnConfig, d_input: int, bidirectional: bool = False) -> nn.RNNBase:
    """n_layers stacked LSTM or GRU layers of d_model units, dropout between them."""
    cell = nn.LSTM if config.cell == "lstm" else nn.GRU
    dropout = config.dropout if config.n_layers > 1 else 0.0
    return cell(
        d_input,
        config.d_model,
        num_layers=config.n_layers,
        dropout=dropout,
        bidirectional=bidirectional,
        batch_first=True,
    )


class RnnEncoder(nn.Module):
    """h_i = RNN(Emb(x_i), h_{i-1}); bidirectional: [forward h_i; backward h_i]."""

    def __init__(self, tokens: nn.Embedding, config: RnnConfig, pad: int):
        super().__init__()
        self.tokens, self.pad = tokens, pad
        self.dropout = Dropout(config.dropout)
        self.directions = 2 if config.bidirectional else 1
        self.rnn = _recurrent(config, config.d_embed, config.bidirectional)
        d_outputs, project = self.directions * config.d_model, config.memory_projection
        self.W_p = Linear(d_outputs, config.d_model, bias=False) if project else None

    def forward(self, src: Tensor) -> RnnEncoded:
        """src (B, S) -> h_i (B, S, d_memory), zero at padding, and the last states."""
        src_pad_mask = src != self.pad
        lengths = src_pad_mask.sum(dim=1).cpu()  # packing wants them on the CPU
        x = self.dropout(self.tokens(src))  # (B, S, d_embed)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        outputs, state = self.rnn(packed)
        memory, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.size(1))
        if self.W_p is not None:
            memory = self.W_p(memory)
        hidden, cell = state if isinstance(state, tuple) else (state, None)
        final_cell = None if cell is None else self._by_layer(cell)
        return RnnEncoded(memory, src_pad_mask, self._by_layer(hidden), final_cell)

    def _by_layer(self, state: Tensor) -> Tensor:
        """torch's (L * directions, B, d) last states -> (L, B, directions * d)."""
        _, b, d = state.shape
        by_direction = state.view(-1, self.directions, b, d).transpose(1, 2)  # (L, B, dirs, d)
        return by_direction.reshape(-1, b, self.directions * d)


class RnnDecoder(nn.Module):
    """The attentional decoder: Luong's wiring for dot, general and concat, Bahdanau's for
    additive; h~'_j = tanh(W_c [c_j; h'_j] + b_c) and y_j = softmax(W_o h~'_j + b_o)."""

    def __init__(self, tokens: nn.Embedding, config: RnnConfig):
        super().__init__()
        self.tokens = tokens
        self.dropout = Dropout(config.dropout)
        self.bahdanau, self.input_feeding = config.score == "additive", config.input_feeding
        self.n_layers, self.d_model = config.n_layers, config.d_model
        # Fed to each step beside Emb(y_{j-1}): c_j (Bahdanau), h~'_{j-1} (input feeding), or none.
        d_fed = config.d_memory if self.bahdanau else config.d_model if self.input_feeding else 0
        self.rnn = _recurrent(config, config.d_embed + d_fed)
        self.attention = GlobalAttention(config.score, config.d_model, config.d_memory)
        self.W_c = Linear(config.d_memory + config.d_model, config.d_model)  # and b_c
        self.W_o = None if config.tie_output else Linear(config.d_model, config.vocab_size, False)
        self.b_o = nn.Parameter(torch.zeros(config.vocab_size))
        d_final = config.d_model * (2 if config.bidirectional else 1)
        bridge, lstm = config.decoder_init == "bridge", config.cell == "lstm"
        self.W_b = Linear(d_final, config.d_model) if bridge else None  # and b_b
        self.W_b_cell = Linear(d_final, config.d_model) if bridge and lstm else None

    def init_cache(self, encoded: RnnEncoded, group: int) -> RnnCache:
        """h'_0 for `group` rows per sentence (zero, or bridged), h~'_0 = 0, the keys once."""
        hidden, cell = self._initial_state(encoded)
        hidden = hidden.repeat_interleave(group, dim=1)  # (L, N, d_model)
        cell = None if cell is None else cell.repeat_interleave(group, dim=1)
        rows = encoded.memory.size(0) * group
        feed = encoded.memory.new_zeros(rows, self.d_model) if self.input_feeding else None
        keys = self.attention.keys(encoded.memory)
        return RnnCache(encoded.memory, keys, encoded.src_pad_mask, hidden, cell, feed, group)

    def _initial_state(self, encoded: RnnEncoded) -> tuple[Tensor, Tensor | None]:
        """(L, B, d_model) h'_0 and c'_0: zero, or tanh(W_b [last states] + b_b) per layer."""
        if self.W_b is None:
            zeros = encoded.memory.new_zeros(self.n_layers, encoded.memory.size(0), self.d_model)
            return zeros, zeros if isinstance(self.rnn, nn.LSTM) else None
        hidden = torch.tanh(self.W_b(encoded.final_hidden))
        cell = None if self.W_b_cell is None else torch.tanh(self.W_b_cell(encoded.final_cell))
        return hidden, cell

    def forward(self, tgt_in: Tensor, cache: RnnCache) -> tuple[Tensor, Tensor]:
        """tgt_in (N, T), the positions after those in `cache` -> logits (N, T, V), alpha
        (N, T, S). Advances `cache` by T positions."""
        y = self.dropout(self.tokens(tgt_in))  # (N, T, d_embed)
        if self.bahdanau or self.input_feeding:  # each position needs the one before it
            positions = [self._position(y[:, t : t + 1], cache) for t in range(y.size(1))]
            attentional = torch.cat([p[0] for p in positions], dim=1)  # (N, T, d_model)
            alpha = torch.cat([p[1] for p in positions], dim=1)  # (N, T, S)
        else:  # the recurrence runs over all T at once; attention then asks with every h'_j
            attentional, alpha = self._position(y, cache)
        if self.W_o is None:  # tied: W_o is the target embedding
            return linear(attentional, self.tokens.weight, self.b_o), alpha
        return self.W_o(attentional) + self.b_o, alpha

    def _position(self, y: Tensor, cache: RnnCache) -> tuple[Tensor, Tensor]:
        """Emb(y_{j-1}) (N, T, d_embed) -> h~'_j (N, T, d_model), alpha (N, T, S)."""
        attend = self.attention
        if self.bahdanau:  # c_j from h'_{j-1}, then h'_j = RNN([Emb(y_{j-1}); c_j], h'_{j-1})
            previous = cache.hidden[-1][:, None]  # (N, 1, d_model): the top layer's h'_{j-1}
            context, alpha = attend(previous, cache.keys, cache.memory, cache.src_pad_mask)
            h, cache.state = self.rnn(torch.cat([y, context], dim=-1), cache.state)
        else:  # Luong: h'_j = RNN([Emb(y_{j-1}); h~'_{j-1}], h'_{j-1}), then c_j from h'_j
            x = y if cache.feed is None else torch.cat([y, cache.feed[:, None]], dim=-1)
            h, cache.state = self.rnn(x, cache.state)  # (N, T, d_model)
            context, alpha = attend(h, cache.keys, cache.memory, cache.src_pad_mask)
        attentional = self.dropout(torch.tanh(self.W_c(torch.cat([context, h], dim=-1))))
        if cache.feed is not None:
            cache.feed = attentional[:, -1]
        return attentional, alpha


class RnnEncoderDecoder(nn.Module):
    """The recurrent encoder-decoder with attention; implements `contract.Seq2Seq`."""

    def __init__(self, config: RnnConfig, pad: int = 0):
        super().__init__()
        if config.vocab_size <= 0:
            raise ValueError("model.vocab_size must be set (it comes from the data's vocabulary)")
        self.config, self.pad = config, pad
        tgt_tokens = nn.Embedding(config.vocab_size, config.d_embed, padding_idx=pad)
        src_tokens = (
            tgt_tokens
            if config.share_embeddings
            else nn.Embedding(config.vocab_size, config.d_embed, padding_idx=pad)
        )
        self.encoder = RnnEncoder(src_tokens, config, pad)
        self.decoder = RnnDecoder(tgt_tokens, config)
        for parameter in self.parameters():  # every parameter U(-0.1, 0.1), as Luong s4.1
            nn.init.uniform_(parameter, -0.1, 0.1)
        with torch.no_grad():
            src_tokens.weight[pad].zero_()
            tgt_tokens.weight[pad].zero_()

    @property
    def max_positions(self) -> int | None:
        return None  # a recurrence takes any length

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: src (B, S), tgt_in (B, T) -> logits (B, T, V)."""
        logits, _ = self.decoder(tgt_in, self.init_cache(self.encode(src)))
        return logits

    def encode(self, src: Tensor) -> RnnEncoded:
        """src (B, S) -> h_i (B, S, d_memory), the padding mask and the last states."""
        return self.encoder(src)

    def init_cache(self, encoded: RnnEncoded, group: int = 1) -> RnnCache:
        """h'_0 for `group` rows (beams) per sentence; the encoder's outputs once per sentence."""
        return self.decoder.init_cache(encoded, group)

    def step(self, tokens: Tensor, cache: RnnCache) -> Tensor:
        """The next position: tokens (N, 1), the last output of each row -> logits (N, V)."""
        logits, _ = self.decoder(tokens, cache)
        return logits[:, -1]

    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, AttentionMaps]:
        """Teacher forcing, with alpha as one single-head map (B, 1, T, S)."""
        logits, alpha = self.decoder(tgt_in, self.init_cache(self.encode(src)))
        return logits, AttentionMaps(decoder_cross=[alpha[:, None]])
