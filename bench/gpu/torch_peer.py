"""The baseline trunk in PyTorch: the peer bench_trunk is compared with.

Same model as engine/nn's expert trunk (x ++ sinusoidal(cond) -> linear ->
6 x {h += W2 SiLU(W1 LN(h) + b1) + b2} -> LN -> linear), timed in eager mode
in fp32 (TF32 off) and under bf16 autocast: a training step (forward, MSE,
backward, AdamW) at batch 4096, a no-grad forward at batch 4096, and a
20-step Euler sampler at the sampling batch.  Prints
"RESULT <name> <ms> <tflops> <per_s>" rows like bench_trunk.

usage: python3 torch_peer.py [--quick] [--sample-batch N] [--steps N]
"""
import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

IN, NC, EMB, H, L, OUT, BATCH = 6480, 2, 32, 512, 6, 6480, 4096
EMB_SCALE, MAX_PERIOD = 1000.0, 1e4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(H, eps=1e-5)
        self.l1 = nn.Linear(H, H)
        self.l2 = nn.Linear(H, H)

    def forward(self, h):
        return h + self.l2(F.silu(self.l1(self.ln(h))))


class Trunk(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(IN + NC * EMB, H)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(H, eps=1e-5)
        self.out = nn.Linear(H, OUT)
        half = EMB // 2
        freq = torch.exp(-math.log(MAX_PERIOD) * torch.arange(half) / half)
        self.register_buffer("freq", freq)

    def embed(self, cond):
        t = cond[:, :, None] * EMB_SCALE * self.freq          # [B, NC, half]
        return torch.cat([t.sin(), t.cos()], dim=2).flatten(1)

    def forward(self, x, cond):
        h = self.inp(torch.cat([x, self.embed(cond)], dim=1))
        for b in self.blocks:
            h = b(h)
        return self.out(self.ln(h))


def fwd_flops(rows):
    D = IN + NC * EMB
    return 2.0 * rows * (D * H + L * 2 * H * H + H * OUT)


def train_flops(rows):
    return 3 * fwd_flops(rows) - 2.0 * rows * (IN + NC * EMB) * H


def timed(fn, reps, warm=3):
    for _ in range(warm):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def result(name, ms, flops, per_s):
    tf = flops / (ms * 1e-3) / 1e12 if ms > 0 and flops > 0 else 0.0
    print(f"RESULT {name} {ms:.4f} {tf:.2f} {per_s:.0f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sample-batch", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_peer: no CUDA device", file=sys.stderr)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    reps = 5 if args.quick else 20
    torch.manual_seed(0)
    model = Trunk().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(BATCH, IN, device=dev)
    cond = torch.rand(BATCH, NC, device=dev)
    tgt = torch.randn(BATCH, OUT, device=dev)

    for prec in ("fp32", "bf16"):
        ac = torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16")

        def step():
            opt.zero_grad(set_to_none=False)
            with ac:
                out = model(x, cond)
            loss = F.mse_loss(out.float(), tgt)
            loss.backward()
            opt.step()

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        ms = timed(step, reps)
        result(f"torch_train_{prec}_eager", ms, train_flops(BATCH), BATCH / (ms * 1e-3))
        # the peer's peak over its training steps: weights, AdamW's moments,
        # the batch, and what autocast saves for the backward
        peak = torch.cuda.max_memory_allocated() / 1048576.0
        print(f"MEMORY torch_train_{prec} {peak:.1f}", flush=True)

        def fwd():
            with torch.no_grad(), ac:
                model(x, cond)

        ms = timed(fwd, reps)
        result(f"torch_fwd_{prec}_eager", ms, fwd_flops(BATCH), BATCH / (ms * 1e-3))

        sb, steps = args.sample_batch, args.steps
        e = torch.rand(sb, 1, device=dev)

        def sample():
            with torch.no_grad(), ac:
                s = torch.randn(sb, IN, device=dev)
                dt = 1.0 / steps
                for k in range(steps):
                    c = torch.cat([e, torch.full_like(e, k * dt)], dim=1)
                    s = s + dt * model(s, c).float()
            return s

        ms = timed(sample, 2 if args.quick else 3, warm=1)
        result(f"torch_sample{steps}_{prec}_eager", ms, steps * fwd_flops(sb), sb / (ms * 1e-3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
