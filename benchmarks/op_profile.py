"""Where an update's time goes, by kind of operation and by phase, from a torch.profiler trace.

Used by `train_step.py --profile`. Each operator's self time (its own, not its children's) is
put in one kind (products, the attention kernel, softmax and loss, layer norm, dropout, copies
and layout, reductions, elementwise, ...) and one phase: forward, backward (under an autograd
engine node) or optimizer (under `Optimizer.step`/`zero_grad`, and gradient clipping's
`_foreach_` operators). `masked_fill` counts as dropout: in training it is dropout's (the fused
attention takes its masks itself), forward and backward. What the operators' self times do not
cover of the wall time is Python and the framework between operators.
"""

from __future__ import annotations

from collections import defaultdict

PHASES = ("forward", "backward", "optimizer")

# Operator name fragments, first match wins; names are lower-cased before matching.
KINDS = (
    ("products", ("_linear_pointwise", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")),
    ("attention kernel", ("scaled_dot_product", "flash_attention")),
    ("softmax + loss", ("softmax", "nll_loss", "logsumexp", "gather", "scatter")),
    ("layer norm", ("layer_norm",)),
    ("dropout", ("dropout", "bernoulli", "random_", "masked_fill", "aten::lt")),  # dropout.py's
    ("embedding", ("embedding",)),
    ("copies + layout", ("copy_", "clone", "contiguous", "cat", "index", "fill_", "zero_")),
    ("allocation", ("empty", "resize_")),
    ("reductions", ("sum", "norm", "amax", "mean", "max")),
    ("elementwise", ("add", "mul", "div", "sub", "sqrt", "relu", "threshold", "where", "exp")),
)


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, fragments in KINDS:
        if any(fragment in lowered for fragment in fragments):
            return kind
    return "other"


def phase_of(event) -> str:
    """The phase of the outermost range this event sits in. Gradient clipping has no range of
    its own: its `_foreach_` operators (the model's own code has none) count as optimizer."""
    phase = "forward"
    if event.name.startswith("aten::_foreach"):
        return "optimizer"
    while event is not None:
        if event.name.startswith("Optimizer."):
            return "optimizer"
        if event.name.startswith("autograd::engine"):
            phase = "backward"
        event = event.cpu_parent
    return phase


def table(profiler, updates: int, wall_seconds: float) -> str:
    """A Markdown table: ms per update by kind (rows) and phase (columns), with shares."""
    ms: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PHASES, 0.0))
    for event in profiler.events():
        if event.name.startswith(("autograd::engine", "Optimizer.", "##")):
            continue  # ranges, not operators: their time is their children's
        ms[kind_of(event.name)][phase_of(event)] += event.self_cpu_time_total / 1e3 / updates
    wall_ms = wall_seconds * 1e3 / updates
    lines = [
        f"| kind | {' | '.join(PHASES)} | ms / update | share of wall |",
        "|---|" + "---|" * (len(PHASES) + 2),
    ]
    rows = sorted(ms.items(), key=lambda item: -sum(item[1].values()))
    for kind, by_phase in rows:
        total = sum(by_phase.values())
        cells = " | ".join(f"{by_phase[p]:.1f}" for p in PHASES)
        lines.append(f"| {kind} | {cells} | {total:.1f} | {total / wall_ms:.0%} |")
    covered = sum(sum(by_phase.values()) for by_phase in ms.values())
    gap = wall_ms - covered
    between = "between operators (Python, framework, profiler)"
    lines.append(f"| {between} | | | | {gap:.1f} | {gap / wall_ms:.0%} |")
    lines.append(f"| **wall** | | | | **{wall_ms:.1f}** | 100% |")
    return "\n".join(lines)


def top_operators(profiler, updates: int, count: int = 15) -> str:
    """The operators with the most self time, ms per update, with their kind and call count."""
    averages = sorted(profiler.key_averages(), key=lambda a: -a.self_cpu_time_total)
    lines = ["| operator | kind | calls / update | ms / update |", "|---|---|---|---|"]
    for average in averages[:count]:
        ms = average.self_cpu_time_total / 1e3 / updates
        calls = average.count / updates
        lines.append(f"| `{average.key}` | {kind_of(average.key)} | {calls:.0f} | {ms:.1f} |")
    return "\n".join(lines)
