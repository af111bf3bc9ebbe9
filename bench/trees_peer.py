#!/usr/bin/python3
"""A second opinion on `giant eval`'s tree classifier: scikit-learn's
histogram gradient boosting on features computed here, independently of the
engine, from the same two files.

`giant eval` trains XGBoost's trees (engine/eval/eval_trees.h) on its own
high-level features and on the voxels.  This script computes per-layer
features in numpy (layer_profile.py's: log10 energy, hits, the energy-weighted
centres and widths in x, y and r, with log10 E_inc), and the voxels / E_inc
with log10 E_inc, and trains sklearn.ensemble.HistGradientBoostingClassifier
(depth 6, learning rate 0.1, at most 300 rounds, early stopping after 30 on a
20 % select split) on a 60 / 20 / 20 split of each file, R seeds.  Another
library, another feature code, another split: when both say the same AUC
within their spreads, the number belongs to the showers, not to one
implementation.  With --giant EVAL.json (giant eval --json of the same two
files) it prints giant's numbers beside and their difference.

Usage: bench/trees_peer.py GENERATED.h5 REFERENCE.h5 [--alpha 16 --radial 9]
       [--repeats 5] [--giant EVAL.json] [--no-voxels]
Needs scikit-learn (Debian: python3-sklearn), numpy and h5py."""
import argparse
import json

import h5py
import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier

from layer_profile import auc, shower_features


def load(path, n_alpha, n_r):
    with h5py.File(path, "r") as f:
        showers = f["showers"][:].astype(np.float64)
        e_inc = f["incident_energies"][:].reshape(-1).astype(np.float64)
    n_layers = showers.shape[1] // (n_alpha * n_r)
    feats = shower_features(showers, n_layers, n_alpha, n_r)
    high = np.column_stack([np.log10(e_inc)] + [feats[k] for k in feats])
    low = np.column_stack([showers / e_inc[:, None], np.log10(e_inc)])
    return high.astype(np.float32), low.astype(np.float32)


def trees_auc(xa, xb, seed):
    """Held-out AUC of sklearn's trees told to separate xa from xb."""
    rng = np.random.default_rng(seed)
    n = min(len(xa), len(xb))
    ia, ib = rng.permutation(len(xa))[:n], rng.permutation(len(xb))[:n]
    n_fit = n * 8 // 10            # train + select: sklearn cuts the select rows
    fit = np.concatenate([xa[ia[:n_fit]], xb[ib[:n_fit]]])
    y_fit = np.r_[np.ones(n_fit), np.zeros(n_fit)]
    clf = HistGradientBoostingClassifier(
        learning_rate=0.1, max_iter=300, max_depth=6, max_leaf_nodes=64,
        early_stopping=True, validation_fraction=0.25, n_iter_no_change=30,
        random_state=seed)
    clf.fit(fit, y_fit)
    pa = clf.predict_proba(xa[ia[n_fit:]])[:, 1]
    pb = clf.predict_proba(xb[ib[n_fit:]])[:, 1]
    return auc(pa, pb), clf.n_iter_


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("generated")
    p.add_argument("reference")
    p.add_argument("--alpha", type=int, default=16, help="angular bins a layer (dataset 2: 16)")
    p.add_argument("--radial", type=int, default=9, help="radial bins a layer (dataset 2: 9)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--giant", help="giant eval --json of the same files, printed beside")
    p.add_argument("--no-voxels", action="store_true", help="the high-level features only")
    a = p.parse_args()
    ha, la = load(a.generated, a.alpha, a.radial)
    hb, lb = load(a.reference, a.alpha, a.radial)
    g = json.load(open(a.giant)) if a.giant else None
    inputs = [("high", "trees_high", ha, hb)]
    if not a.no_voxels:
        inputs.append(("voxels", "trees_low", la, lb))
    print("input   sklearn AUC (mean +- sd over %d seeds)  rounds   giant eval trees  difference"
          % a.repeats)
    for name, key, xa, xb in inputs:
        res = [trees_auc(xa, xb, 42 + s) for s in range(a.repeats)]
        m = np.mean([r[0] for r in res])
        sd = np.std([r[0] for r in res], ddof=1) if a.repeats > 1 else 0.0
        rounds = np.mean([r[1] for r in res])
        line = "%-7s %.4f +- %.4f %26.0f" % (name, m, sd, rounds)
        c = g.get("classifier", {}).get(key) if g else None
        if c:
            line += "   %.4f +- %.4f   %+.4f" % (c["auc"], c.get("auc_sd", 0.0), c["auc"] - m)
        print(line)


if __name__ == "__main__":
    main()
