#!/usr/bin/python3
"""PyTorch reference for test_nn_torch: builds the expert trunk with random
weights, runs it on random inputs in fp32 and under CPU bf16 autocast, and
writes weights, inputs, outputs and gradients of L = sum(r * out) to a
fixture file.

Usage: torch_ref.py OUT_FILE IN_DIM COND_DIM EMB_DIM EMB_SCALE HIDDEN BLOCKS OUT_DIM ROWS

Fixture: records of  u32 name_len, name (utf-8), u32 rows, u32 cols,
rows*cols float32 (little-endian).  Names: the engine's parameter names
prefixed "param:", "grad32:" / "grad16:" (gradients in fp32 / bf16
autocast), and x, cond, r, out32, out16, dx32, dx16.
Exit code 77 when torch is unavailable (the test is then skipped)."""
import math
import struct
import sys

try:
    import torch
    import torch.nn as tnn
except ImportError:
    sys.exit(77)


def sinusoidal(cond, emb_dim, scale, max_period):
    half = emb_dim // 2
    j = torch.arange(half, dtype=torch.float32)
    w = torch.exp(-math.log(max_period) * j / half)
    arg = (cond * scale).unsqueeze(-1) * w
    return torch.cat([torch.sin(arg), torch.cos(arg)], dim=-1).reshape(cond.shape[0], -1)


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
    def __init__(self, in_dim, nc, emb, scale, hidden, blocks, out_dim):
        super().__init__()
        self.emb, self.scale = emb, scale
        self.inp = tnn.Linear(in_dim + nc * emb, hidden)
        self.blocks = tnn.ModuleList([Block(hidden) for _ in range(blocks)])
        self.ln = tnn.LayerNorm(hidden, eps=1e-5)
        self.out = tnn.Linear(hidden, out_dim)

    def forward(self, x, cond):
        xin = torch.cat([x, sinusoidal(cond, self.emb, self.scale, 10000.0)], dim=1)
        h = self.inp(xin).float()
        for b in self.blocks:
            h = b(h)
        return self.out(self.ln(h)).float()


def engine_names(m):
    """(engine name, torch parameter) pairs."""
    yield "in.w", m.inp.weight
    yield "in.b", m.inp.bias
    for l, b in enumerate(m.blocks):
        yield f"blk{l}.ln.g", b.ln.weight
        yield f"blk{l}.ln.b", b.ln.bias
        yield f"blk{l}.fc1.w", b.fc1.weight
        yield f"blk{l}.fc1.b", b.fc1.bias
        yield f"blk{l}.fc2.w", b.fc2.weight
        yield f"blk{l}.fc2.b", b.fc2.bias
    yield "out.ln.g", m.ln.weight
    yield "out.ln.b", m.ln.bias
    yield "out.w", m.out.weight
    yield "out.b", m.out.bias


def main():
    if len(sys.argv) != 10:
        print(__doc__, file=sys.stderr)
        return 2
    path = sys.argv[1]
    in_dim, nc, emb = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    scale = float(sys.argv[5])
    hidden, blocks, out_dim, rows = (int(a) for a in sys.argv[6:10])
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    m = Trunk(in_dim, nc, emb, scale, hidden, blocks, out_dim)
    with torch.no_grad():
        # non-trivial biases and LayerNorm parameters, so they are tested
        for _, p in engine_names(m):
            if p.dim() == 1:
                p.copy_(0.3 * torch.randn_like(p))
        for b in list(m.blocks) + [m]:
            ln = b.ln
            ln.weight.copy_(1.0 + 0.3 * torch.randn_like(ln.weight))
    x = torch.randn(rows, in_dim)
    cond = torch.rand(rows, nc)
    r = torch.randn(rows, out_dim)
    recs = []

    def add(name, t):
        t = t.detach().float().contiguous()
        if t.dim() == 1:
            t = t.unsqueeze(0)
        recs.append((name, t))

    for name, p in engine_names(m):
        add("param:" + name, p)
    add("x", x)
    add("cond", cond)
    add("r", r)
    for tag, bf16 in (("32", False), ("16", True)):
        m.zero_grad(set_to_none=True)
        xx = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = m(xx, cond)
        (out.float() * r).sum().backward()
        add("out" + tag, out)
        add("dx" + tag, xx.grad)
        for name, p in engine_names(m):
            add(f"grad{tag}:" + name, p.grad)
    with open(path, "wb") as f:
        for name, t in recs:
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<II", t.shape[0], t.shape[1]))
            f.write(t.numpy().astype("<f4").tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
