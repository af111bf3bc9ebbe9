#!/usr/bin/python3
"""PyTorch eager peer of the engine benchmark: the same expert trunk, shapes,
loss and optimizer, timed the same way (median of timed iterations after a
warm-up).  Prints one line per measurement:
    torch <precision> <train|sample> <ms_median> <ms_min>
"""
import argparse
import math
import os
import sys
import time

try:
    import torch
    import torch.nn as tnn
except ImportError:
    print("torch unavailable", file=sys.stderr)
    sys.exit(77)


def sinusoidal(cond, emb_dim, scale, max_period):
    half = emb_dim // 2
    j = torch.arange(half, dtype=torch.float32)
    w = torch.exp(-math.log(max_period) * j / half)
    arg = (cond * scale).unsqueeze(-1) * w  # rows, nc, half
    emb = torch.cat([torch.sin(arg), torch.cos(arg)], dim=-1)
    return emb.reshape(cond.shape[0], -1)


class Block(tnn.Module):
    def __init__(self, h):
        super().__init__()
        self.ln = tnn.LayerNorm(h, eps=1e-5)
        self.fc1 = tnn.Linear(h, h)
        self.fc2 = tnn.Linear(h, h)

    def forward(self, x):
        # the residual stream stays fp32 under autocast, as in the engine
        return x + self.fc2(torch.nn.functional.silu(self.fc1(self.ln(x)))).float()


class Trunk(tnn.Module):
    def __init__(self, in_dim, nc, emb, hidden, blocks, out_dim):
        super().__init__()
        self.emb = emb
        self.inp = tnn.Linear(in_dim + nc * emb, hidden)
        self.blocks = tnn.ModuleList([Block(hidden) for _ in range(blocks)])
        self.ln = tnn.LayerNorm(hidden, eps=1e-5)
        self.out = tnn.Linear(hidden, out_dim)

    def forward(self, x, cond):
        h = self.inp(torch.cat([x, sinusoidal(cond, self.emb, 1000.0, 10000.0)], dim=1)).float()
        for b in self.blocks:
            h = b(h)
        return self.out(self.ln(h)).float()


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
    m = Trunk(a.in_dim, a.cond, a.emb, a.hidden, a.blocks, a.out_dim)
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
