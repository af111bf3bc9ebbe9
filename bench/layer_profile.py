#!/usr/bin/python3
"""Per-layer shape of generated showers beside a reference: mean layer
energy, hits (voxels over 0), energy-weighted radial centre and width (in
radial bins), and the share of showers whose layer is empty, every third
layer.  `giant eval` says *that* a group is off; this says *how* (too
narrow, too many small hits, ...).

With --auc K it prints instead the K per-layer features that tell the files
apart best on their own: each feature's univariate ROC AUC (0.5: the same
distribution), the place to look when the classifier's AUC is high.

With --corr it prints instead how layers move together within a shower: for
pairs of layers, the correlation of their log energies, radial widths and
hit counts after a least-squares fit on log E_inc, its square and log E_dep
is taken out of each (so what is left is the shower's own fluctuation),
over the showers where both layers have energy.  A model that does not know
where a shower stands on its longitudinal profile shows it here.

With --angles it prints instead how often each angular bin is hit (over
every layer, ring and shower) and its share of the energy: the reference is
symmetric about the beam axis, so every bin is alike up to noise, and a
model's angular bias (the same in every shower, which the high-level
features sum away) shows as the spread between bins.

With --spread it prints instead the spread of the hit counts, per decade of
E_inc, every fifth layer: the standard deviation of the layer's hits, and
how much of its variance is the rings' own (the sum of the per-ring count
variances) against what the rings share (the rest: their covariances).  A
model that gets the means right but regresses towards them shows smaller
numbers in both.

With --rings L,L,... it prints instead, for the given layers, how often each
radial ring is hit (over the showers whose layer has energy) and the median
log10 share of the layer's energy a hit ring holds: a model that leaves
outer rings empty too often, or fills them too thinly, narrows the widths
even when the mean shares are right.

With --tails L,L,... it prints instead, for the given layers, quantiles of
the energy-weighted radial centre and width (bin units, over the showers
whose layer has energy) and their standard deviations: a model whose means
are right can still put a layer's energy far out too often, a tail the
features' histograms show only faintly and a classifier combines over the
layers.

Usage: bench/layer_profile.py GENERATED.h5 REFERENCE.h5 [--alpha A --radial R]
       [--auc K | --corr | --angles | --spread | --rings L,L,... | --tails L,L,...]
(the dataset-2 binning by default: 45 layers of 16 angles x 9 rings, the
ring index fastest, as CaloChallenge stores voxels)."""
import argparse

import h5py
import numpy as np


def arg_parser(doc, *files, epochs=None):
    """The command line of this script and the others that read its
    features: the files named (positional), then the binning (--alpha
    angles, --radial rings: dataset 2's by default), and for a script that
    trains a classifier (epochs given: the default of --epochs) its epochs
    and --seed (1).  doc's first paragraph is the description."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for name in files:
        ap.add_argument(name)
    ap.add_argument("--alpha", type=int, default=16)
    ap.add_argument("--radial", type=int, default=9)
    if epochs is not None:
        ap.add_argument("--epochs", type=int, default=epochs)
        ap.add_argument("--seed", type=int, default=1)
    return ap


def layer_stats(showers, n_layers, n_alpha, n_r):
    x = showers.reshape(len(showers), n_layers, n_alpha, n_r)
    energy = x.sum((2, 3))
    hits = (x > 0).sum((2, 3))
    rings = x.sum(2) / np.maximum(energy[..., None], 1e-12)
    centre_of_bin = np.arange(n_r) + 0.5
    centre = (rings * centre_of_bin).sum(-1)
    width = np.sqrt(np.maximum((rings * centre_of_bin ** 2).sum(-1) - centre ** 2, 0))
    return energy, hits, centre, width


def shower_features(showers, n_layers, n_alpha, n_r):
    """Per-layer features in bin units: log10 energy, hits, the centres and
    widths in x, y (voxel centres on the unit-spaced polar grid) and r."""
    x = showers.reshape(len(showers), n_layers, n_alpha, n_r).astype(np.float64)
    energy = x.sum((2, 3))
    w = x / np.maximum(energy[..., None, None], 1e-12)
    r = np.arange(n_r) + 0.5
    phi = 2 * np.pi * (np.arange(n_alpha) + 0.5) / n_alpha
    pos = {"x": np.cos(phi)[:, None] * r[None, :], "y": np.sin(phi)[:, None] * r[None, :],
           "r": np.broadcast_to(r[None, :], (n_alpha, n_r))}
    out = {"logE": np.log10(energy + 1e-8), "hits": (x > 0).sum((2, 3)).astype(np.float64)}
    for k, p in pos.items():
        c = (w * p).sum((2, 3))
        out["EC_" + k] = c
        out["width_" + k] = np.sqrt(np.maximum((w * p * p).sum((2, 3)) - c * c, 0))
    return out


def auc(a, b):
    """ROC AUC of a against b (ties count half), from average ranks."""
    v = np.concatenate([a, b])
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(len(v))
    sv = v[order]
    start = np.r_[0, np.flatnonzero(np.diff(sv)) + 1]
    end = np.r_[start[1:], len(v)]
    for s0, e0 in zip(start, end):
        ranks[order[s0:e0]] = 0.5 * (s0 + e0 - 1) + 1
    return (ranks[:len(a)].sum() - len(a) * (len(a) + 1) / 2) / (len(a) * len(b))


def print_auc(gen, ref, n_layers, n_alpha, n_r, k):
    fg = shower_features(gen, n_layers, n_alpha, n_r)
    fr = shower_features(ref, n_layers, n_alpha, n_r)
    rows = []
    for name in fg:
        for l in range(n_layers):
            a = auc(fg[name][:, l], fr[name][:, l])
            rows.append((abs(a - 0.5), a, name, l, fg[name][:, l].mean(), fr[name][:, l].mean()))
    rows.sort(reverse=True)
    print("feature | layer | AUC gen vs ref | mean gen / ref")
    for _, a, name, l, mg, mr in rows[:k]:
        print("%-8s | %5d | %.3f | %9.3f %9.3f" % (name, l, a, mg, mr))


CORR_PAIRS = ((2, 5), (2, 12), (5, 12), (12, 20), (12, 30), (20, 30))


def print_corr(files, n_layers, n_alpha, n_r):
    print("file | " + " | ".join("layers %d-%d: E / width / hits" % p for p in CORR_PAIRS))
    for name, showers, e_inc in files:
        energy, hits, _, width = layer_stats(showers, n_layers, n_alpha, n_r)
        le = np.log(e_inc)
        ld = np.log(energy.sum(1) + 1e-9)
        basis = np.c_[np.ones_like(le), le, le ** 2, ld]

        def resid(y):
            coef = np.linalg.lstsq(basis, y, rcond=None)[0]
            return y - basis @ coef

        cells = []
        for a, b in CORR_PAIRS:
            both = (energy[:, a] > 0) & (energy[:, b] > 0)
            r = []
            for f in (np.log(energy + 1e-3), width, hits.astype(np.float64)):
                x, y = resid(f[:, a])[both], resid(f[:, b])[both]
                r.append(np.corrcoef(x, y)[0, 1])
            cells.append("%+.2f %+.2f %+.2f" % tuple(r))
        print(name + " | " + " | ".join(cells))


def print_angles(files, n_layers, n_alpha, n_r):
    print("file      | hit rate by angular bin, relative to its mean (min .. max) | "
          "spread (max/min - 1) | energy share spread")
    for name, x in files:
        v = x.reshape(len(x), n_layers, n_alpha, n_r)
        hits = (v > 0).mean((0, 1, 3))
        e = v.sum((0, 1, 3))
        share = e / e.sum()
        rel = hits / hits.mean()
        print("%-9s | %s | %.2f %% | %.2f %%" % (
            name, " ".join("%.3f" % r for r in rel), 100 * (rel.max() / rel.min() - 1),
            100 * (share.max() / share.min() - 1)))


def print_spread(files, n_layers, n_alpha, n_r):
    print("layer | E_inc decade | hits std gen / ref | rings' own variance gen / ref | "
          "shared (covariance) gen / ref")
    stats = []
    for x, e in files:
        v = x.reshape(len(x), n_layers, n_alpha, n_r)
        stats.append(((v > 0).sum(2), np.log10(e)))   # [showers, layers, rings] counts
    (cg, lg), (cr, lr) = stats
    for layer in range(0, n_layers, 5):
        for d in range(int(np.floor(min(lg.min(), lr.min()))),
                       int(np.ceil(max(lg.max(), lr.max())))):
            mg, mr = (lg >= d) & (lg < d + 1), (lr >= d) & (lr < d + 1)
            if mg.sum() < 50 or mr.sum() < 50:
                continue
            out = []
            for c in (cg[mg, layer], cr[mr, layer]):
                own, total = c.var(0).sum(), c.sum(1).var()
                out.append((np.sqrt(total), own, total - own))
            print("%5d | 1e%d-1e%d MeV | %5.2f %5.2f | %6.2f %6.2f | %6.2f %6.2f" % (
                layer, d, d + 1, out[0][0], out[1][0], out[0][1], out[1][1], out[0][2],
                out[1][2]))


def print_rings(files, layers, n_layers, n_alpha, n_r):
    for layer in layers:
        for name, x in files:
            v = x.reshape(len(x), n_layers, n_alpha, n_r)[:, layer].astype(np.float64)
            energy = v.sum((1, 2))
            v, energy = v[energy > 0], energy[energy > 0]
            ring = v.sum(1)
            hit = ring > 0
            share = [np.median(np.log10(ring[hit[:, j], j] / energy[hit[:, j]]))
                     if hit[:, j].sum() > 5 else float("nan") for j in range(n_r)]
            print("layer %2d %-9s P(hit) %s" % (layer, name, " ".join("%.3f" % p for p in hit.mean(0))))
            print("         %-9s log10 share | hit %s" % ("", " ".join("%+.2f" % q for q in share)))


def print_tails(files, layers, n_layers, n_alpha, n_r):
    q = (0.5, 0.9, 0.99, 0.999)
    print("layer | quantity | file | sd | " + " ".join("q%g" % (100 * v) for v in q))
    stats = [(name, layer_stats(x, n_layers, n_alpha, n_r)) for name, x in files]
    for l in layers:
        for k, what in ((2, "r centre"), (3, "r width")):
            for name, st in stats:
                v = st[k][:, l][st[0][:, l] > 0]
                print("%5d | %-8s | %-9s | %5.3f | %s" % (
                    l, what, name, v.std(), " ".join("%6.3f" % x for x in np.quantile(v, q))))


def main():
    ap = arg_parser(__doc__, "generated", "reference")
    ap.add_argument("--auc", type=int, default=0, metavar="K")
    ap.add_argument("--corr", action="store_true")
    ap.add_argument("--angles", action="store_true")
    ap.add_argument("--spread", action="store_true")
    ap.add_argument("--rings", default="", metavar="L,L,...")
    ap.add_argument("--tails", default="", metavar="L,L,...")
    a = ap.parse_args()
    fg, fr = h5py.File(a.generated, "r"), h5py.File(a.reference, "r")
    gen, ref = fg["showers"][:], fr["showers"][:]
    n_layers = gen.shape[1] // (a.alpha * a.radial)
    if a.corr:
        print_corr((("generated", gen, fg["incident_energies"][:].ravel()),
                    ("reference", ref, fr["incident_energies"][:].ravel())),
                   n_layers, a.alpha, a.radial)
        return
    if a.spread:
        print_spread(((gen, fg["incident_energies"][:].ravel()),
                      (ref, fr["incident_energies"][:].ravel())), n_layers, a.alpha, a.radial)
        return
    for opt, show in (("rings", print_rings), ("tails", print_tails)):
        if not getattr(a, opt):
            continue
        try:
            layers = [int(l) for l in getattr(a, opt).split(",")]
        except ValueError:
            ap.error("--%s takes layer indices separated by commas, e.g. 1,19" % opt)
        if any(not 0 <= l < n_layers for l in layers):
            ap.error("--%s: a layer index must lie in 0 .. %d" % (opt, n_layers - 1))
        show((("generated", gen), ("reference", ref)), layers, n_layers, a.alpha, a.radial)
        return
    if a.angles:
        print_angles((("generated", gen), ("reference", ref)), n_layers, a.alpha, a.radial)
        return
    if a.auc:
        print_auc(gen, ref, n_layers, a.alpha, a.radial, a.auc)
        return
    g = layer_stats(gen, n_layers, a.alpha, a.radial)
    r = layer_stats(ref, n_layers, a.alpha, a.radial)
    print("layer | E MeV gen / ref | hits gen / ref | r centre gen / ref | "
          "r width gen / ref | empty gen / ref")
    for l in range(0, n_layers, 3):
        print("%5d | %8.1f %8.1f | %6.2f %6.2f | %5.2f %5.2f | %5.2f %5.2f | %.3f %.3f" % (
            l, g[0][:, l].mean(), r[0][:, l].mean(), g[1][:, l].mean(), r[1][:, l].mean(),
            g[2][:, l].mean(), r[2][:, l].mean(), g[3][:, l].mean(), r[3][:, l].mean(),
            (g[0][:, l] == 0).mean(), (r[0][:, l] == 0).mean()))


if __name__ == "__main__":
    main()
