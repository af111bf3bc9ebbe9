#!/usr/bin/python3
"""Which high-level features let a classifier tell generated showers from the
reference.  `giant eval` gives one AUC over every feature; this trains the
same kind of classifier (an MLP on standardised features, held-out split,
seeded) on subsets: each feature kind alone, every kind but one, and the
layers in three depth bands, so a high AUC points at a kind and a depth.

Features per layer, as `giant eval` feeds its classifier: log10(E + 1e-8),
hits, the energy-weighted centre and width in x, y and r (bin units, 0 for
an empty layer), and log10 E_inc once.

Usage: bench/hlf_groups.py GENERATED.h5 REFERENCE.h5 [--alpha 16 --radial 9]
       [--epochs 40] [--seed 1]
Needs PyTorch (Debian: python3-torch) and h5py."""
import h5py
import numpy as np
import torch

from layer_profile import arg_parser, shower_features


def features(path, n_alpha, n_r):
    """log10 E_inc and layer_profile.py's per-layer features of a file."""
    f = h5py.File(path, "r")
    showers = f["showers"][:]
    e_inc = f["incident_energies"][:].reshape(-1).astype(np.float64)
    n_layers = showers.shape[1] // (n_alpha * n_r)
    return np.log10(e_inc), shower_features(showers, n_layers, n_alpha, n_r), n_layers


def classifier_auc(xg, xr, epochs, seed):
    """Held-out AUC of an MLP trained to tell the rows of xg from xr: 60 %
    train, 40 % test, features standardised on the training split."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([xg, xr]).astype(np.float32)
    y = np.concatenate([np.ones(len(xg)), np.zeros(len(xr))]).astype(np.float32)
    idx = rng.permutation(len(x))
    n_tr = int(0.6 * len(x))
    tr, te = idx[:n_tr], idx[n_tr:]
    mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-6
    x = (x - mu) / sd
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 128), torch.nn.SiLU(),
                              torch.nn.Linear(128, 128), torch.nn.SiLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=1e-2)
    xt, yt = torch.from_numpy(x[tr]), torch.from_numpy(y[tr])
    for _ in range(epochs):
        perm = torch.from_numpy(rng.permutation(len(tr)))
        for b in range(0, len(tr), 256):
            j = perm[b:b + 256]
            opt.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(xt[j])[:, 0], yt[j])
            loss.backward()
            opt.step()
    with torch.no_grad():
        s = net(torch.from_numpy(x[te]))[:, 0].numpy()
    pos, neg = s[y[te] == 1], s[y[te] == 0]
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    return (ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def main():
    a = arg_parser(__doc__, "generated", "reference", epochs=40).parse_args()
    torch.set_num_threads(1)
    eg, fg, n_layers = features(a.generated, a.alpha, a.radial)
    er, fr, _ = features(a.reference, a.alpha, a.radial)
    kinds = list(fg)
    bands = {"layers 0-9": range(0, 10), "layers 10-29": range(10, 30),
             "layers 30-": range(30, n_layers)}

    def stack(f, e, names, layers):
        cols = [e[:, None]] + [f[k][:, list(layers)] for k in names]
        return np.concatenate(cols, 1)

    def run(label, names, layers):
        v = classifier_auc(stack(fg, eg, names, layers), stack(fr, er, names, layers),
                           a.epochs, a.seed)
        print("%-24s | %.3f" % (label, v))

    print("features (with log10 E_inc) | held-out AUC")
    run("all", kinds, range(n_layers))
    for k in kinds:
        run(k + " only", [k], range(n_layers))
    for k in kinds:
        run("all but " + k, [x for x in kinds if x != k], range(n_layers))
    for label, layers in bands.items():
        run("all kinds, " + label, kinds, layers)


if __name__ == "__main__":
    main()
