import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transduce.models import attention
from transduce.models.attention import MultiHeadAttention, attention_reference, causal_mask

from .conftest import tiny_model


def _qkv(seed=0, b=2, h=2, tq=3, tk=4, d_k=5, d_v=3):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, tq, d_k, generator=g, dtype=torch.float64)
    k = torch.randn(b, h, tk, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(b, h, tk, d_v, generator=g, dtype=torch.float64)
    return q, k, v


def test_reference_is_softmax_of_scaled_dot_products():
    q, k, v = _qkv()
    out, weights = attention_reference(q, k, v, None)
    expected = torch.softmax(q @ k.transpose(-2, -1) / 5**0.5, dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)


def test_masked_keys_get_zero_weight():
    q, k, v = _qkv()
    mask = torch.tensor([True, True, False, True])
    _, weights = attention_reference(q, k, v, mask)
    assert weights[..., 2].abs().max() == 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 3, dtype=torch.float64))


def test_causal_mask_with_a_cache_offset():
    assert causal_mask(3, 3).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]
    assert causal_mask(1, 4).tolist() == [[True, True, True, True]]


def test_fused_and_reference_paths_agree_in_values_and_gradients():
    q, k, v = (t.requires_grad_() for t in _qkv())
    mask = torch.tensor([[True, True, True, False], [True, False, True, True]])[:, None, None, :]
    ref, _ = attention_reference(q, k, v, mask)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(fused, ref)
    grads_ref = torch.autograd.grad(ref.sum(), (q, k, v))
    grads_fused = torch.autograd.grad(fused.sum(), (q, k, v))
    for a, b in zip(grads_ref, grads_fused, strict=True):
        torch.testing.assert_close(a, b)


def test_gradcheck_reference_attention():
    q, k, v = (t.requires_grad_() for t in _qkv(b=1, h=1, tq=2, tk=3, d_k=2, d_v=2))
    assert torch.autograd.gradcheck(lambda *x: attention_reference(*x, None)[0], (q, k, v))


def test_multi_head_with_d_k_and_d_v_apart_from_d_model_over_h():
    torch.manual_seed(0)
    attention = MultiHeadAttention(d_model=12, h=3, d_k=2, d_v=7).double()
    x = torch.randn(2, 4, 12, dtype=torch.float64)
    k, v = attention.project_kv(x)
    assert k.shape == (2, 3, 4, 2) and v.shape == (2, 3, 4, 7)
    out, weights = attention(x, k, v, need_weights=True)
    fused, none = attention(x, k, v)
    assert out.shape == (2, 4, 12) and weights.shape == (2, 3, 4, 4) and none is None
    torch.testing.assert_close(out, fused)


def test_grouped_queries_equal_copied_keys_and_values():
    torch.manual_seed(0)
    attention = MultiHeadAttention(d_model=8, h=2, d_k=4, d_v=4).double()
    memory = torch.randn(2, 5, 8, dtype=torch.float64)
    queries = torch.randn(6, 1, 8, dtype=torch.float64)  # 3 beams per sentence
    k, v = attention.project_kv(memory)
    grouped, w_grouped = attention(queries, k, v, need_weights=True)
    copied_k, copied_v = k.repeat_interleave(3, 0), v.repeat_interleave(3, 0)
    copied, w_copied = attention(queries, copied_k, copied_v, need_weights=True)
    torch.testing.assert_close(grouped, copied)
    torch.testing.assert_close(w_grouped, w_copied)


def test_grouped_queries_with_a_padding_mask_on_the_fused_path():
    torch.manual_seed(1)
    attention = MultiHeadAttention(d_model=8, h=2, d_k=4, d_v=4).double()
    memory = torch.randn(2, 5, 8, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]
    queries = torch.randn(6, 1, 8, dtype=torch.float64)
    k, v = attention.project_kv(memory)
    grouped, _ = attention(queries, k, v, mask)
    copied, _ = attention(
        queries, k.repeat_interleave(3, 0), v.repeat_interleave(3, 0), mask.repeat_interleave(3, 0)
    )
    torch.testing.assert_close(grouped, copied)


def test_self_attention_projects_with_one_stacked_product_when_decoding():
    torch.manual_seed(2)
    attention = MultiHeadAttention(d_model=12, h=3, d_k=2, d_v=7).double()
    x = torch.randn(2, 4, 12, dtype=torch.float64)
    apart = (attention.project_q(x), *attention.project_kv(x))
    with torch.no_grad():
        stacked = attention.project_qkv(x)
        weight = attention._stacked_qkv()[0]
    assert weight.shape == (3 * 2 + 3 * 2 + 3 * 7, 12)
    for ours, theirs in zip(stacked, apart, strict=True):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    with torch.no_grad():  # kept while the weights are unchanged, made again when one changes
        attention.project_qkv(x)
        assert attention._stacked_qkv()[0] is weight
        attention.w_v.bias.add_(1.0)
        _, _, v = attention.project_qkv(x)
    torch.testing.assert_close(v, attention.project_kv(x)[1], rtol=0, atol=1e-12)
    attention.float()  # the weights' data move: the float64 copy is not used
    with torch.no_grad():
        q, _, _ = attention.project_qkv(x.float())
    assert q.dtype == torch.float32
    torch.testing.assert_close(q, attention.project_q(x.float()))


def test_a_projection_swapped_for_another_kind_of_layer_keeps_its_own_product():
    """A layer that is not our plain Linear (an adapter, torch.ao's quantized Linear, whose
    `weight` is a method) is called as it is, not stacked from a weight it may not have."""

    class Adapter(nn.Module):  # a frozen layer plus a learned offset, as adapters do
        def __init__(self, inner: nn.Linear):
            super().__init__()
            self.inner, self.offset = inner, nn.Parameter(torch.full((inner.out_features,), 0.5))

        def forward(self, x):
            return self.inner(x) + self.offset

    torch.manual_seed(4)
    attention = MultiHeadAttention(d_model=8, h=2, d_k=4, d_v=4).double()
    attention.w_k = Adapter(attention.w_k).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    with torch.no_grad():
        q, k, v = attention.project_qkv(x)
        k_of_the_adapter, v_apart = attention.project_kv(x)
    torch.testing.assert_close(k, k_of_the_adapter, rtol=0, atol=0)
    torch.testing.assert_close(v, v_apart, rtol=0, atol=0)
    torch.testing.assert_close(q, attention.project_q(x), rtol=0, atol=0)


def _projections_and_gradients(monkeypatch, stacked: bool) -> tuple[list, int]:
    """Self-attention's and cross-attention's projections of a layer in training, every
    gradient after a backward through them, and how many products the projections took."""
    monkeypatch.setattr(attention, "STACKED_TRAINING_DEVICES", {"cpu"} if stacked else set())
    products = []
    monkeypatch.setattr(
        attention, "linear", lambda x, w, b: products.append(w.shape) or F.linear(x, w, b)
    )
    monkeypatch.setattr(
        attention.Linear, "forward", lambda self, x: attention.linear(x, self.weight, self.bias)
    )
    torch.manual_seed(3)
    layer = MultiHeadAttention(d_model=12, h=3, d_k=2, d_v=5).double().train()
    x = torch.randn(2, 4, 12, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 6, 12, dtype=torch.float64, requires_grad=True)
    q, k, v = layer.project_qkv(x)
    cross_k, cross_v = layer.project_kv(memory)
    n_products = len(products)
    out, _ = layer.attend(q, k, v)
    out2, _ = layer.attend(q, cross_k, cross_v)
    (out.square().sum() + out2.pow(3).sum()).backward()
    assert layer._stacked is None  # the decoding copy is not made or used in training
    grads = [x.grad, memory.grad, *(p.grad for p in layer.parameters())]
    return [q, k, v, cross_k, cross_v, out, out2, *grads], n_products


def test_training_projects_with_stacked_weights_and_each_layer_gets_its_own_gradient(
    monkeypatch,
):
    """One product for queries, keys and values (d_k apart from d_v), one for keys and values
    of the encoder's output; values and every gradient as with each layer's own product. (A GPU
    trains so; the CPU, where stacking did not pay, is made to here.)"""
    stacked, stacked_products = _projections_and_gradients(monkeypatch, stacked=True)
    apart, apart_products = _projections_and_gradients(monkeypatch, stacked=False)
    assert (stacked_products, apart_products) == (2, 5)
    for ours, theirs in zip(stacked, apart, strict=True):
        assert ours is not None and ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    assert all(g.abs().sum() > 0 for g in stacked[7:])  # every parameter reached


def test_training_stacks_the_projections_on_a_gpu_and_not_on_the_cpu():
    layer = MultiHeadAttention(d_model=8, h=2, d_k=4, d_v=4)
    layers = (layer.w_q, layer.w_k, layer.w_v)
    assert layer._stacks_in_training(layers, torch.device("cuda", 0))
    assert not layer._stacks_in_training(layers, torch.device("cpu"))
    with torch.no_grad():  # decoding has its own stacked copy (`_stacked_qkv`)
        assert not layer._stacks_in_training(layers, torch.device("cuda", 0))


def test_the_encoders_self_attention_stacks_in_training_only(monkeypatch):
    """`self_attend`: where training stacks, one product and the same values and gradients;
    without gradients each layer's own product, so hooks on them see the encoder's inputs."""
    torch.manual_seed(5)
    layer = MultiHeadAttention(d_model=12, h=3, d_k=2, d_v=5).double().train()
    x = torch.randn(2, 4, 12, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])[:, None, None, :]
    calls = []
    layer.w_q.register_forward_hook(lambda *_: calls.append("w_q"))
    results = {}
    for devices in ({"cpu"}, set()):
        monkeypatch.setattr(attention, "STACKED_TRAINING_DEVICES", devices)
        out, _ = layer.self_attend(x, mask)
        grads = torch.autograd.grad(out.square().sum(), [x, *layer.parameters()])
        results[bool(devices)] = [out, *grads]
    assert calls == ["w_q"]  # only the unstacked run called the layer
    for stacked, apart in zip(results[True], results[False], strict=True):
        torch.testing.assert_close(stacked, apart, rtol=0, atol=1e-12)
    monkeypatch.setattr(attention, "STACKED_TRAINING_DEVICES", {"cpu"})
    with torch.no_grad():
        layer.self_attend(x, mask)
    assert calls == ["w_q", "w_q"]


def _fused_calls_as_on_a_gpu(monkeypatch, reading) -> list:
    """Each fused attention call's `reading()` of the backends allowed, the model choosing its
    kernels as on a GPU (`fused_kernels` told "cuda") and training on the kernel as a GPU does."""
    readings, fused, choose = [], F.scaled_dot_product_attention, attention.fused_kernels

    def recording(*args, **kwargs):
        readings.append(reading())
        return fused(*args, **kwargs)

    def as_on_a_gpu(device, training=False):
        return choose(torch.device("cuda"), training)

    monkeypatch.setattr(attention, "fused_kernels", as_on_a_gpu)
    monkeypatch.setattr(attention, "EXPLICIT_TRAINING_SPAN", 0)
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", recording)
    return readings


def test_on_a_gpu_attention_never_takes_cudnns_kernel(monkeypatch):
    """cuDNN's fused attention builds a plan for each new input shape (~6 ms a call, SPEED.md):
    on a GPU the fused call may take flash, memory-efficient or math attention, not cuDNN's; on a
    CPU nothing is restricted; the choice holds only inside, and each fused call of every
    attention (encoder, decoder self- and cross-) is made inside it."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    backends = torch.backends.cuda
    assert backends.cudnn_sdp_enabled()  # PyTorch's default, restored below
    with attention.fused_kernels(cuda):
        assert not backends.cudnn_sdp_enabled()
        assert backends.flash_sdp_enabled() and backends.mem_efficient_sdp_enabled()
    with attention.fused_kernels(cpu):
        assert backends.cudnn_sdp_enabled()
    assert backends.cudnn_sdp_enabled()

    cudnn_allowed = _fused_calls_as_on_a_gpu(monkeypatch, backends.cudnn_sdp_enabled)
    model = tiny_model().train()
    model(torch.tensor([[4, 5, 6, 3]]), torch.tensor([[2, 7, 8]]))
    n_layers = model.config.n_layers
    assert cudnn_allowed == [False] * (3 * n_layers)


def test_on_a_gpu_training_attention_never_takes_flash(monkeypatch):
    """`GPU_KERNELS_TRAINING`: flash cost 1.1-1.9x the memory-efficient kernel without a mask
    (session 31) and `big`'s update was 1.035x as fast with the decoder's causal self-attention
    off it (session 43; SPEED.md), so every fused call in training, encoder, causal and
    cross-attention, padded batch or not, is made without flash; decoding (not measured on that
    kernel) may still take it."""
    cuda, backends = torch.device("cuda"), torch.backends.cuda
    with attention.fused_kernels(cuda, training=True):
        assert not backends.flash_sdp_enabled() and not backends.cudnn_sdp_enabled()
        assert backends.mem_efficient_sdp_enabled()
    with attention.fused_kernels(cuda):
        assert backends.flash_sdp_enabled()
    assert backends.flash_sdp_enabled()

    flash_allowed = _fused_calls_as_on_a_gpu(monkeypatch, backends.flash_sdp_enabled)
    model = tiny_model().train()
    src, tgt = torch.tensor([[4, 5, 6, 3]]), torch.tensor([[2, 7, 8]])
    n_layers = model.config.n_layers
    model(src, tgt, src_padded=False)  # encoder layers, then each decoder's self- and cross-
    assert flash_allowed == [False] * (3 * n_layers)
    flash_allowed.clear()
    model(src, tgt)  # a padded batch: the source mask given
    assert flash_allowed == [False] * (3 * n_layers)
    flash_allowed.clear()
    model.eval()
    with torch.no_grad():
        model(src, tgt)  # outside training, as decoding's calls
    assert flash_allowed == [True] * (3 * n_layers)
    flash_allowed.clear()
    model.eval()(src, tgt, src_padded=False)
    assert flash_allowed == [True] * (3 * n_layers)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_training_step_on_a_gpu_runs_no_cudnn_attention():
    model = tiny_model(dtype=torch.float32).train().cuda()
    src = torch.tensor([[4, 5, 6, 3], [7, 3, 0, 0]], device="cuda")
    tgt = torch.tensor([[2, 7, 8], [2, 9, 0]], device="cuda")
    with torch.profiler.profile() as profile, torch.autocast("cuda", dtype=torch.bfloat16):
        model(src, tgt).float().sum().backward()
    names = {event.name for event in profile.events()}
    assert any("attention" in name for name in names)
    assert not any("cudnn_attention" in name for name in names)


def _recorded_paths(monkeypatch) -> list[str]:
    """Which way each attention call went from here on: "explicit" or "kernel"."""
    paths, reference, kernel = [], attention.attention_reference, F.scaled_dot_product_attention

    def explicit(*args, **kwargs):
        paths.append("explicit")
        return reference(*args, **kwargs)

    def fused(*args, **kwargs):
        paths.append("kernel")
        return kernel(*args, **kwargs)

    monkeypatch.setattr(attention, "attention_reference", explicit)
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", fused)
    return paths


@pytest.mark.parametrize(("span", "way"), [(3, "explicit"), (32, "explicit"), (33, "kernel")])
def test_cpu_training_takes_the_explicit_formula_up_to_32_positions_and_the_kernel_beyond(
    monkeypatch, span, way
):
    paths = _recorded_paths(monkeypatch)
    layer = MultiHeadAttention(d_model=8, h=2, d_k=4, d_v=4).train()
    x = torch.randn(2, span, 8)
    layer(x, *layer.project_kv(x), None, True)
    layer(x[:, :2], *layer.project_kv(x))  # 2 queries over `span` keys: the longer side counts
    with torch.no_grad():  # training mode without gradients (dev loss): the kernel
        layer(x, *layer.project_kv(x))
    assert paths == [way, way, "kernel"]


@pytest.mark.parametrize("causal", [False, True])
def test_the_explicit_path_trains_as_the_kernel_does(monkeypatch, causal):
    """Outputs and every gradient the same either way, with padding or the causal mask."""
    results = {}
    for span in (0, 100):  # the kernel always, the explicit formula always
        monkeypatch.setattr(attention, "EXPLICIT_TRAINING_SPAN", span)
        torch.manual_seed(3)
        layer = MultiHeadAttention(d_model=12, h=3, d_k=4, d_v=5).double().train()
        x = torch.randn(3, 6, 12, dtype=torch.float64, requires_grad=True)
        mask = (
            None
            if causal
            else torch.arange(6)[None, None, None, :] < torch.tensor([6, 4, 1])[:, None, None, None]
        )
        out, _ = layer(x, *layer.project_kv(x), mask, causal)
        out.pow(2).sum().backward()
        results[span] = [out, x.grad, *(p.grad for p in layer.parameters())]
    for explicit, fused in zip(results[100], results[0], strict=True):
        torch.testing.assert_close(explicit, fused)


def test_decoding_takes_the_explicit_formula_for_one_new_position_and_the_kernel_for_more(
    monkeypatch,
):
    """Out of training on a CPU, one query per row (a decoding step, beams counted per row, not
    as the g queries they are grouped into) is 1.5-2.5x faster written out; several positions
    (teacher forcing, scoring) keep the kernel, and so do GPUs (SPEED.md, session 27)."""
    paths = _recorded_paths(monkeypatch)
    torch.manual_seed(6)
    layer = MultiHeadAttention(d_model=8, h=2, d_k=4, d_v=4).eval()
    k, v = layer.project_kv(torch.randn(2, 5, 8))
    layer(torch.randn(2, 1, 8), k, v)  # a step, one row per sentence
    layer(torch.randn(6, 1, 8), k, v)  # a step of 3 beams per sentence
    layer(torch.randn(2, 4, 8), k, v)  # 4 positions of each sentence at once
    assert paths == ["explicit", "explicit", "kernel"]
    assert not layer._explicit_is_faster(1, 5, torch.device("cuda"))


def test_the_explicit_attention_drops_weights_at_its_rate_and_rescales_the_rest():
    """`attention_reference(..., dropout=p)` (CPU training's path over short spans) zeroes each
    attention weight with chance p and divides the others by 1 - p; the output uses them."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 16, 8, generator=generator, dtype=torch.float64)
    torch.manual_seed(0)
    _, plain = attention.attention_reference(q, k, v, None)
    out, dropped = attention.attention_reference(q, k, v, None, dropout=0.25)
    kept = dropped != 0
    assert 0.7 < kept.double().mean() < 0.8
    torch.testing.assert_close(dropped[kept], plain[kept] / 0.75)
    torch.testing.assert_close(out, dropped @ v)
