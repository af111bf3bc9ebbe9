#!/usr/bin/python3
"""PyTorch eager peer of the engine benchmark: the same expert trunk, shapes,
loss and optimizer, timed the same way (median of timed iterations after a
warm-up).  Prints one line per measurement:
    torch <precision> <train|sample> <ms_median> <ms_min>
"""
import argparse
import os
import sys
import time

try:
    import torch
except ImportError:
    print("torch unavailable", file=sys.stderr)
    sys.exit(77)


# The model itself is the one test_nn_torch checks the engine against.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "nn"))
from torch_ref import Trunk  # noqa: E402


def timeit(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--in-dim", type=int, default=6480)
    ap.add_argument("--out-dim", type=int, default=6480)
    ap.add_argument("--cond", type=int, default=2)
    ap.add_argument("--emb", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--precision", default="fp32,bf16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    # emb scale 1000, as nn_bench's trunk
    m = Trunk(a.in_dim, a.cond, a.emb, 1000.0, a.hidden, a.blocks, a.out_dim)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)
    x = torch.randn(a.batch, a.in_dim)
    c = torch.rand(a.batch, a.cond)
    y = torch.randn(a.batch, a.out_dim)

    for prec in a.precision.split(","):
        bf16 = prec == "bf16"

        def train():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = m(x, c)
            loss = torch.nn.functional.mse_loss(out.float(), y)
            loss.backward()
            opt.step()

        def sample():
            with torch.inference_mode():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    m(x, c)

        tr = timeit(train, a.warmup, a.iters)
        sa = timeit(sample, a.warmup, a.iters)
        print(f"torch {prec} train {tr[0]:.3f} {tr[1]:.3f}")
        print(f"torch {prec} sample {sa[0]:.3f} {sa[1]:.3f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
