"""Recomputes a few separation powers of `giant eval` the way the
CaloChallenge evaluation code does (numpy histograms with density=True and
its _separation_power), for the cross-check in test_cmd.

usage: calochallenge_sep.py A.h5 B.h5 eval.json  (dataset-2 geometry)
Exits 1 when a value differs by more than 5e-3."""
import json
import sys

import h5py
import numpy as np


def separation_power(h1, h2, bins):
    h1, h2 = h1 * np.diff(bins), h2 * np.diff(bins)
    ret = (h1 - h2) ** 2
    ret /= h1 + h2 + 1e-16
    return 0.5 * ret.sum()


def sep(a, b, bins):
    ca, _ = np.histogram(a, bins=bins, density=True)
    cb, _ = np.histogram(b, bins=bins, density=True)
    return separation_power(cb, ca, bins)


def main():
    fa, fb, js = sys.argv[1:4]
    with h5py.File(fa, "r") as f:
        ea, sa = f["incident_energies"][:, 0], f["showers"][:]
    with h5py.File(fb, "r") as f:
        eb, sb = f["incident_energies"][:, 0], f["showers"][:]
    got = json.load(open(js))["separation_power"]
    # dataset-2 binning: 45 layers x 16 angles x 9 radii (radial fastest)
    r_mid = (np.arange(9) + 0.5) * 4.65
    a_mid = -np.pi + (np.arange(16) + 0.5) * 2 * np.pi / 16
    eta = (r_mid[None, :] * np.cos(a_mid[:, None])).ravel()
    want = {"Etot/Einc": sep(sa.sum(-1) / ea, sb.sum(-1) / eb, np.linspace(0.5, 1.5, 101))}
    for layer in (5, 12, 20):
        la = sa[:, layer * 144:(layer + 1) * 144]
        lb = sb[:, layer * 144:(layer + 1) * 144]
        ela, elb = la.sum(-1), lb.sum(-1)
        bins = np.logspace(np.log10(0.5e-3 / 0.033), np.log10(elb.max()), 40)
        want["E_layer_%d" % layer] = sep(ela, elb, bins)
        eca = (la * eta).sum(-1) / (ela + 1e-16)
        ecb = (lb * eta).sum(-1) / (elb + 1e-16)
        want["EC_eta_%d" % layer] = sep(eca, ecb, np.linspace(-30, 30, 101))
    bad = 0
    for k, v in want.items():
        ok = abs(got[k] - v) <= 5e-3
        bad += not ok
        print("%-12s giant %.6f  calochallenge %.6f  %s" % (k, got[k], v, "ok" if ok else "DIFF"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
