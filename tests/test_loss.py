from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from transduce.training.loss import label_smoothed_loss

PAD = 0


def _batch(seed=0, v=7):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 4, v, generator=g, dtype=torch.float64)
    target = torch.tensor([[3, 5, 6, PAD], [2, 4, PAD, PAD]])
    return logits, target


def test_label_smoothing_is_the_cross_entropy_against_the_smoothed_distribution():
    logits, target = _batch()
    eps, v = 0.1, logits.size(-1)
    smoothed = torch.full(logits.shape, eps / v, dtype=torch.float64)
    smoothed.scatter_add_(
        -1, target[..., None], torch.full((2, 4, 1), 1 - eps, dtype=torch.float64)
    )
    per_token = -(smoothed * torch.log_softmax(logits, -1)).sum(-1)
    expected = per_token[target != PAD].sum()
    sums = label_smoothed_loss(logits, target, eps, PAD)
    assert sums.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert sums.n_tokens == 5


def test_without_smoothing_it_is_the_negative_log_likelihood():
    logits, target = _batch(1)
    sums = label_smoothed_loss(logits, target, 0.0, PAD)
    nll = F.cross_entropy(logits.view(-1, 7), target.view(-1), ignore_index=PAD, reduction="sum")
    assert sums.loss.item() == pytest.approx(nll.item(), rel=1e-6)
    assert sums.nll.item() == pytest.approx(nll.item(), rel=1e-6)


def test_padding_positions_do_not_count():
    logits, target = _batch(2)
    changed = logits.clone()
    changed[target == PAD] = 100.0
    a = label_smoothed_loss(logits, target, 0.1, PAD)
    b = label_smoothed_loss(changed, target, 0.1, PAD)
    assert a.loss.item() == pytest.approx(b.loss.item())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_logits_are_scored_in_float32(dtype):
    """Autocast hands the loss bfloat16 logits: their log-softmax over the vocabulary and the sums
    over the batch's tokens are taken in float32 (in half precision the sums alone would be off
    by more than 0.1%), so the loss of the rounded logits is that of the same values in float32."""
    g = torch.Generator().manual_seed(0)
    logits = (4 * torch.randn(64, 8, 1000, generator=g)).to(dtype)
    target = torch.randint(1, 1000, (64, 8), generator=g)
    half = label_smoothed_loss(logits, target, 0.1, PAD)
    full = label_smoothed_loss(logits.float(), target, 0.1, PAD)
    assert half.loss.dtype == half.nll.dtype == torch.float32
    torch.testing.assert_close(half.loss, full.loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(half.nll, full.nll, rtol=1e-6, atol=0)


def test_gradcheck():
    logits, target = _batch(3)
    logits.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: label_smoothed_loss(x, target, 0.1, PAD).loss, (logits,)
    )


@pytest.mark.parametrize("chunk_rows", [1, 3, 5, 100])  # 5 does not divide the 8 positions
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_the_projected_loss_in_chunks_equals_the_loss_of_the_logits(monkeypatch, chunk_rows, eps):
    """Same sums and same gradients (hidden and weight, scaled by the caller's factor) as the
    logits path, however the rows are chunked; padding rows get no gradient."""
    import transduce.training.loss as loss_module

    v, d = 7, 5
    monkeypatch.setattr(loss_module, "CHUNK_LOGITS", chunk_rows * v)
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(2, 4, d, generator=g, requires_grad=True)
    weight = torch.randn(v, d, generator=g, requires_grad=True)
    _, target = _batch()
    plain = label_smoothed_loss(F.linear(hidden, weight), target, eps, PAD)
    expected = torch.autograd.grad(plain.loss * 0.3, [hidden, weight])
    fused = loss_module.projected_label_smoothed_loss(hidden, weight, target, eps, PAD)
    got = torch.autograd.grad(fused.loss * 0.3, [hidden, weight])
    assert fused.loss.item() == pytest.approx(plain.loss.item(), rel=1e-5)
    assert fused.nll.item() == pytest.approx(plain.nll.item(), rel=1e-5)
    assert fused.n_tokens == plain.n_tokens == 5
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    assert (got[0][target == PAD] == 0).all()
    with torch.no_grad():  # validation: the sums alone
        assert loss_module.projected_label_smoothed_loss(
            hidden, weight, target, eps, PAD
        ).loss.item() == pytest.approx(plain.loss.item(), rel=1e-5)


def test_the_projected_loss_keeps_its_precision_where_most_probabilities_underflow():
    """Logits spread over hundreds of nats (a confident model): exp underflows to 0 for most
    words, and a target far below the top has a probability float32 cannot hold. The loss and
    its gradient still match float64's, because -log p is read from the normaliser, never from
    the log of a probability."""
    import transduce.training.loss as loss_module

    v, d = 50, 8
    g = torch.Generator().manual_seed(2)
    hidden = (30 * torch.randn(2, 4, d, generator=g)).requires_grad_()
    weight = torch.randn(v, d, generator=g).requires_grad_()
    _, target = _batch()
    exact = label_smoothed_loss(F.linear(hidden.double(), weight.double()), target, 0.1, PAD)
    expected = torch.autograd.grad(exact.loss, [hidden, weight])
    fused = loss_module.projected_label_smoothed_loss(hidden, weight, target, 0.1, PAD)
    got = torch.autograd.grad(fused.loss, [hidden, weight])
    logits = F.linear(hidden.double(), weight.double())
    per_target = -torch.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1))[target != PAD]
    assert per_target.max() > 104  # exp(-104) is below float32's smallest positive number
    assert fused.loss.item() == pytest.approx(exact.loss.item(), rel=1e-5)
    assert fused.nll.item() == pytest.approx(exact.nll.item(), rel=1e-5)
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs.float(), rtol=1e-4, atol=1e-4)


def test_a_chunk_of_logits_is_held_in_one_buffer(monkeypatch):
    """The softmax is written over the chunk's logits: at no moment do two (rows x V) buffers
    live at once (the loss's share of a training step's peak memory, benchmarks/MEMORY.md)."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    import transduce.training.loss as loss_module

    v, d, rows = 50, 8, 10  # (V x d) gradient and hidden smaller than one chunk
    monkeypatch.setattr(loss_module, "CHUNK_LOGITS", rows * v)

    class ChunkBuffers(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.alive, self.most = [], 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else [out]:
                if isinstance(t, torch.Tensor) and t.numel() >= rows * v:
                    self.alive.append(weakref.ref(t))
            live = {t.untyped_storage().data_ptr() for r in self.alive if (t := r()) is not None}
            self.most = max(self.most, len(live))
            return out

    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(35, d, generator=g, requires_grad=True)  # 4 chunks, the last short
    weight = torch.randn(v, d, generator=g, requires_grad=True)
    target = torch.randint(1, v, (35,), generator=g)
    with ChunkBuffers() as buffers:
        loss_module.projected_label_smoothed_loss(hidden, weight, target, 0.1, PAD)
    assert buffers.most == 1


def test_a_batch_of_padding_alone_scores_nothing_and_gets_no_gradient():
    import transduce.training.loss as loss_module

    hidden = torch.randn(2, 3, 5, requires_grad=True)
    weight = torch.randn(7, 5, requires_grad=True)
    target = torch.full((2, 3), PAD)
    sums = loss_module.projected_label_smoothed_loss(hidden, weight, target, 0.1, PAD)
    grads = torch.autograd.grad(sums.loss, [hidden, weight])
    assert sums.loss.item() == sums.nll.item() == sums.n_tokens == 0
    assert all((grad == 0).all() for grad in grads)


def test_the_transformer_hands_the_loss_its_last_states_and_its_output_matrix(monkeypatch):
    """Training on a CPU never builds the (tokens x V) logits of a Transformer: `model_loss` asks
    it for its states and projects them in chunks with the tied (or untied) output matrix."""
    import transduce.training.loss as loss_module
    from transduce.data.batching import collate

    from .conftest import BOS, EOS, tiny_model

    model = tiny_model(5)
    batch = collate([([4, 5, 6], [7, 8]), ([9], [10, 11, 4])], PAD, BOS, EOS)
    seen, real = [], loss_module.projected_label_smoothed_loss

    def recording(hidden, weight, target, eps, pad, fused):
        seen.append((hidden.shape, weight))
        return real(hidden, weight, target, eps, pad, fused)

    monkeypatch.setattr(loss_module, "projected_label_smoothed_loss", recording)
    sums = loss_module.model_loss(model, batch, 0.1, PAD)
    ((shape, weight),) = seen
    assert shape == (*batch.tgt_in.shape, model.config.d_model)
    assert weight is model.tgt_embed.tokens.weight
    plain = label_smoothed_loss(model(batch.src, batch.tgt_in), batch.tgt_out, 0.1, PAD)
    assert sums.loss.item() == pytest.approx(plain.loss.item(), rel=1e-5)


def test_off_the_cpu_the_loss_never_takes_the_cpus_chunks(monkeypatch):
    """The CPU's chunks are sized for its caches; on a GPU they were hundreds of kernel launches
    an update (benchmarks/SPEED.md), so any other device takes the plain path, or, training
    compiled (`fused`), the compiled path's large chunks (tests/test_compiled.py)."""
    import transduce.training.loss as loss_module

    def no_chunks(*args):
        raise AssertionError("chunked off the CPU")

    monkeypatch.setattr(loss_module, "_chunked", no_chunks)
    hidden = torch.empty(2, 3, 4, device="meta", requires_grad=True)
    weight = torch.empty(10, 4, device="meta", requires_grad=True)
    target = torch.zeros(2, 3, dtype=torch.long, device="meta")
    sums = loss_module.projected_label_smoothed_loss(hidden, weight, target, 0.1, PAD)
    assert sums.loss.device.type == "meta" and sums.loss.shape == ()
    with pytest.raises(AssertionError, match="chunked"):  # and the CPU does chunk
        loss_module.projected_label_smoothed_loss(
            torch.randn(2, 3, 4, requires_grad=True),
            torch.randn(10, 4),
            torch.ones(2, 3).long(),
            0.1,
            PAD,
        )


@pytest.mark.parametrize("chunk_rows", [1, 3, 8])  # 3 does not divide the 8 rows
@pytest.mark.parametrize("wanted", [(True, True), (True, False), (False, True)])
def test_the_compiled_path_chunks_equal_the_loss_of_the_logits(monkeypatch, chunk_rows, wanted):
    """`_chunked_compiled` (a GPU's, padding rows kept) gives the logits path's sums and, for each
    gradient asked for, its gradient: however the rows are chunked, zero on padding rows. Run
    here as written (the compiled one: tests/test_compiled.py)."""
    import transduce.training.loss as loss_module

    v, d = 7, 5
    monkeypatch.setattr(loss_module, "COMPILED_CHUNK_LOGITS", chunk_rows * v)
    monkeypatch.setattr(
        loss_module, "_compiled_chunk_sums", lambda: loss_module.chunk_sums_and_gradient
    )
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(8, d, generator=g, requires_grad=wanted[0])
    weight = torch.randn(v, d, generator=g, requires_grad=wanted[1])
    _, target = _batch()
    target = target.reshape(-1)
    plain = label_smoothed_loss(F.linear(hidden, weight), target, 0.1, PAD)
    loss, nll, grad_hidden, grad_weight = loss_module._chunked_compiled(
        hidden.detach(), weight.detach(), target, 0.1, PAD, wanted
    )
    assert loss.item() == pytest.approx(plain.loss.item(), rel=1e-5)
    assert nll.item() == pytest.approx(plain.nll.item(), rel=1e-5)
    asked = [t for t, want in zip([hidden, weight], wanted, strict=True) if want]
    expected = iter(torch.autograd.grad(plain.loss, asked))
    for got, want in zip([grad_hidden, grad_weight], wanted, strict=True):
        if not want:
            assert got is None
            continue
        torch.testing.assert_close(got, next(expected), rtol=1e-5, atol=1e-6)
    if wanted[0]:
        assert (grad_hidden[target == PAD] == 0).all()


@pytest.mark.parametrize("mask_free", [True, False])
@pytest.mark.parametrize("lengths", [(3, 3), (3, 1)])
def test_the_loss_tells_the_model_whether_any_source_is_padded(monkeypatch, lengths, mask_free):
    """`model_loss` hands the Transformer the batch's own answer on `MASK_FREE_DEVICES`: no mask
    only where every source is of one length (a wrong promise would let real tokens attend to
    padding); elsewhere the mask always."""
    import transduce.training.loss as loss_module
    from transduce.data.batching import collate

    from .conftest import BOS, EOS, tiny_model

    monkeypatch.setattr(loss_module, "MASK_FREE_DEVICES", {"cpu"} if mask_free else set())
    model = tiny_model(5)
    pairs = [([4] * n, [7, 8]) for n in lengths]
    batch = collate(pairs, PAD, BOS, EOS)
    seen, forward = [], model.forward

    def recording(src, tgt_in, project=True, src_padded=True):
        seen.append(src_padded)
        return forward(src, tgt_in, project, src_padded)

    model.forward = recording
    loss_module.model_loss(model, batch, 0.1, PAD)
    assert seen == [lengths[0] != lengths[1] or not mask_free]


def test_a_gpu_drops_the_mask_of_an_unpadded_batch_and_the_cpu_keeps_it():
    """`MASK_FREE_DEVICES`: a GPU batch without source padding attends without a mask (on an
    H200 `big` 1.04x and `base` 1.16x the masked update, SPEED.md, session 34); on the CPU it
    keeps its mask (0.99x, session 29). A padded batch keeps it everywhere."""
    import transduce.training.loss as loss_module

    class States(torch.nn.Module):  # a Transformer's side of `model_loss`, recording the promise
        def __init__(self):
            super().__init__()
            self.output_weight = torch.nn.Parameter(torch.randn(6, 4))
            self.seen = []

        def forward(self, src, tgt_in, project=True, src_padded=True):
            self.seen.append(src_padded)
            return torch.randn(*tgt_in.shape, 4)

    network, target = States(), torch.tensor([[4, 5, 3]])
    for device in ("cuda", "cpu"):
        for padded in (False, True):
            src = SimpleNamespace(device=torch.device(device))  # all `model_loss` reads of it
            batch = SimpleNamespace(src=src, tgt_in=target, tgt_out=target, src_padded=padded)
            loss_module.model_loss(network, batch, 0.1, PAD)
    assert network.seen == [False, True, True, True]
