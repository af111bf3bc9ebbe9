"""Reads the RESULT rows of bench_trunk, bench_stage and torch_peer.py and prints one
table: time, TFLOP/s, fraction of the measured cuBLASLt bf16 GEMM rate,
throughput, and the ratios the issue asks about.

usage: python3 summary.py LOG [LOG...]
"""
import sys

MEMORY = {}   # "MEMORY name MiB" rows: device memory a step holds


def load(paths):
    r = {}
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    w = line.split()
                    if len(w) == 5 and w[0] == "RESULT":
                        r[w[1]] = (float(w[2]), float(w[3]), float(w[4]))
                    elif len(w) == 3 and w[0] == "MEMORY":
                        MEMORY[w[1]] = float(w[2])
        except OSError:
            pass
    return r


def main():
    r = load(sys.argv[1:])
    if not r:
        print("summary: no RESULT rows found")
        return 1
    ceil = next((v[1] for k, v in r.items() if k.startswith("gemm_bf16")), 0.0)
    print()
    print(f"{'benchmark':<28} {'ms':>10} {'TFLOP/s':>9} {'% bf16 GEMM':>12} {'per s':>14}")
    print("-" * 77)
    for k, (ms, tf, ps) in r.items():
        frac = f"{100 * tf / ceil:.1f}" if ceil > 0 and tf > 0 else "-"
        print(f"{k:<28} {ms:>10.3f} {tf:>9.1f} {frac:>12} {ps:>14.0f}")
    print()

    def ratio(label, num, den, target=None):
        if num in r and den in r and r[num][0] > 0:
            x = r[den][0] / r[num][0]
            t = f"   (target >= {target}x: {'met' if x >= target else 'NOT met'})" if target else ""
            print(f"{label:<52} {x:6.2f}x{t}")

    ratios = (
        # the whole training step runs eager and as one graph (AdamW clips on
        # the device); its gradient part alone also runs as one graph
        ("bf16 vs fp32 training, eager (speed-up)", "train_bf16_eager", "train_fp32_eager", 1.35),
        ("bf16 vs fp32 training, graph (speed-up)", "train_bf16_graph", "train_fp32_graph", 1.35),
        ("graph vs eager, fp32 whole step", "train_fp32_graph", "train_fp32_eager"),
        ("graph vs eager, bf16 whole step", "train_bf16_graph", "train_bf16_eager"),
        ("bf16 vs fp32 gradient part, graph (speed-up)", "grad_bf16_graph", "grad_fp32_graph"),
        ("graph vs eager, fp32 gradient part", "grad_fp32_graph", "grad_fp32_eager"),
        ("graph vs eager, bf16 gradient part", "grad_bf16_graph", "grad_bf16_eager"),
        ("graph vs eager, bf16 forward", "fwd_bf16_graph", "fwd_bf16_eager"),
        ("giant bf16 vs PyTorch eager bf16 autocast, train",
         "train_bf16_eager", "torch_train_bf16_eager", 2.0),
        ("giant fp32 vs PyTorch eager fp32, train", "train_fp32_eager", "torch_train_fp32_eager"),
        ("giant bf16 graph vs PyTorch eager bf16, train",
         "train_bf16_graph", "torch_train_bf16_eager", 2.0),
        ("giant bf16 graph vs PyTorch eager bf16, forward",
         "fwd_bf16_graph", "torch_fwd_bf16_eager"),
        # the real stage trainer (bench_stage): a step eager and as one graph
        ("stage trainer: graph vs eager, fp32", "stage_fp32_graph", "stage_fp32_eager"),
        ("stage trainer: graph vs eager, bf16", "stage_bf16_graph", "stage_bf16_eager"),
        ("stage trainer: bf16 vs fp32, graph (speed-up)",
         "stage_bf16_graph", "stage_fp32_graph", 1.35),
        ("stage trainer speed vs the trunk step alone, bf16 graph",
         "stage_bf16_graph", "train_bf16_graph"),
    )
    for row in ratios:
        ratio(*row)
    # device memory: the trunk's training step (what it allocates through
    # the backend) and the real trainer (nvidia-smi's peak beyond idle)
    for label, bf, fp in (("bf16 / fp32 training memory, trunk step", "train_bf16", "train_fp32"),
                          ("bf16 / fp32 training memory, PyTorch peak", "torch_train_bf16",
                           "torch_train_fp32"),
                          ("bf16 / fp32 training memory, stage trainer", "stage_bf16",
                           "stage_fp32"),
                          ("bf16 / fp32 training memory, giant train", "trainer_baseline-bf16-euler",
                           "trainer_baseline-fp32-heun")):
        if MEMORY.get(fp, 0) > 0 and bf in MEMORY:
            x = MEMORY[bf] / MEMORY[fp]
            print(f"{label:<52} {x:6.2f}x   (target <= 0.67x: "
                  f"{'met' if x <= 0.67 else 'NOT met'}; {MEMORY[bf]:.0f} / {MEMORY[fp]:.0f} MiB)")
    for prec in ("fp32", "bf16"):
        g, t = MEMORY.get(f"train_{prec}", 0), MEMORY.get(f"torch_train_{prec}", 0)
        if g > 0 and t > 0:
            print(f"{'giant / PyTorch training memory, ' + prec:<52} {g / t:6.2f}x   "
                  f"({g:.0f} / {t:.0f} MiB)")
    for k, (ms, tf, ps) in r.items():
        if k.startswith("sample") and k.endswith("_graph"):
            ok = "met" if ps > 1e6 else "NOT met"
            print(f"{'sampling throughput ' + k:<52} {ps:10.0f} showers/s (target > 1e6: {ok})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
