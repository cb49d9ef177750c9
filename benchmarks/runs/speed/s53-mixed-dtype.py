"""Session 53: elementwise operators of mixed dtypes against the same work in one dtype, at the
shapes of `tiny`'s and `small`'s update on the bfloat16 route (models/bf16.py, models/dropout.py).

    python benchmarks/runs/speed/s53-mixed-dtype.py [THREADS]

Per row: a bfloat16 product raised to float32 with the float32 bias added (PyTorch's promoting
add against `.float()` then `add_`); dropout's residual `addcmul` and plain product with the
uint8 mask against a float32 or bfloat16 mask; the FFN's bfloat16 hidden units times the uint8
mask against a bfloat16 mask. Milliseconds a call, the mean of 60 after 5 to warm up.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
from attention_spans import milliseconds  # a call's mean, after 5 to warm up


def _row(rows: int, width: int) -> str:
    product, bias = torch.randn(rows, width).bfloat16(), torch.randn(width)
    x, residual = torch.randn(rows, width), torch.randn(rows, width)
    keep = (torch.rand(rows, width) > 0.3).to(torch.uint8)
    keep_float, keep_low = keep.float(), keep.bfloat16()
    hidden = torch.randn(rows, width).bfloat16()
    timings = {
        "output: promoting add": lambda: torch.add(product, bias),
        "output: float() then add_": lambda: product.float().add_(bias),
        "addcmul, uint8 mask": lambda: torch.addcmul(residual, x, keep, value=1.4),
        "addcmul, float32 mask": lambda: torch.addcmul(residual, x, keep_float, value=1.4),
        "mul, uint8 mask": lambda: torch.mul(x, keep),
        "mul, float32 mask": lambda: torch.mul(x, keep_float),
        "bfloat16 hidden x uint8 mask": lambda: torch.mul(hidden, keep),
        "bfloat16 hidden x bfloat16 mask": lambda: torch.mul(hidden, keep_low),
    }
    cells = " | ".join(f"{name} {milliseconds(op, 60):.3f}" for name, op in timings.items())
    return f"{rows} x {width}: {cells} ms"


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    for rows, width in [(4096, 128), (4096, 256), (2048, 1024)]:
        print(_row(rows, width), flush=True)


if __name__ == "__main__":
    main()
