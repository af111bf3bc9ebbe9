#!/usr/bin/python3
"""Per-layer shape of generated showers beside a reference: mean layer
energy, hits (voxels over 0), energy-weighted radial centre and width (in
radial bins), and the share of showers whose layer is empty, every third
layer.  `giant eval` says *that* a group is off; this says *how* (too
narrow, too many small hits, ...).

Usage: bench/layer_profile.py GENERATED.h5 REFERENCE.h5 [--alpha A --radial R]
(the dataset-2 binning by default: 45 layers of 16 angles x 9 rings, the
ring index fastest, as CaloChallenge stores voxels)."""
import argparse

import h5py
import numpy as np


def layer_stats(showers, n_layers, n_alpha, n_r):
    x = showers.reshape(len(showers), n_layers, n_alpha, n_r)
    energy = x.sum((2, 3))
    hits = (x > 0).sum((2, 3))
    rings = x.sum(2) / np.maximum(energy[..., None], 1e-12)
    centre_of_bin = np.arange(n_r) + 0.5
    centre = (rings * centre_of_bin).sum(-1)
    width = np.sqrt(np.maximum((rings * centre_of_bin ** 2).sum(-1) - centre ** 2, 0))
    return energy, hits, centre, width


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("generated")
    ap.add_argument("reference")
    ap.add_argument("--alpha", type=int, default=16)
    ap.add_argument("--radial", type=int, default=9)
    a = ap.parse_args()
    gen = h5py.File(a.generated, "r")["showers"][:]
    ref = h5py.File(a.reference, "r")["showers"][:]
    n_layers = gen.shape[1] // (a.alpha * a.radial)
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
