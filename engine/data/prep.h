/* prep: the transforms between showers (MeV per voxel) and the vectors the
 * two model stages see, each with an exact inverse.  The choices and their
 * reasons are written out in engine/data/README.md ("Model representation").
 *
 * Stage 1 (energy):  r = E_dep / E_inc            (prep_encode_energy)
 * Stage 2 (shower):  x = [ logit-map(u_0 .. u_{L-2}),            L-1 values
 *                          logit-map(v_0 .. v_{V-1}) ]            V values
 *   (with rings, each layer's voxel block is preceded by its ring
 *   fractions: prep_layout_set_rings)
 *   u_l = E_l / sum_{j>=l} E_j over the L layers that have voxels
 *   v_i = E_voxel / E_layer within each layer (uniform 1/n when E_layer = 0)
 *   logit-map(p) = logit(alpha + (1 - 2 alpha) p), alpha = 1e-6
 * Conditioning: c = log10(E_inc / MeV) (prep_condition_energy).
 * Every vector is then standardised with prep_stats (training split only). */
#ifndef PREP_H
#define PREP_H

#include <stddef.h>
#include <stdint.h>

#include "geo.h"
#include "gt_error.h"

#define PREP_ALPHA 1e-6
/* The dequantization noise's top, as a share of the threshold, after
 * prep_layout_init (what runs before model.stage2.dequantize_top used). */
#define PREP_DEQUANT_TOP 0.1

typedef struct prep_layout {
    const geo_geometry *geo; /* borrowed                                       */
    int n_layers;            /* L: layers with voxels                          */
    int n_u;                 /* L - 1 stick-breaking fractions                 */
    int n_voxels;            /* V                                              */
    int dim;                 /* n_u + n_voxels: length of a stage-2 vector     */
    float threshold_mev;     /* the representation's threshold: dequantization,
                              * hit counts and decoding's survivors (below) */
    float readout_mev;       /* a decoded voxel under it becomes 0, last of
                              * all (threshold_mev after prep_layout_init) */
    double voxel_alpha;      /* alpha of the voxel fractions' logit-map
                              * (PREP_ALPHA after prep_layout_init)          */
    int dequantize;          /* 0 after prep_layout_init; see below            */
    double dequant_top;      /* noise under dequant_top * threshold            */
    int rings;               /* 0 after prep_layout_init; prep_layout_set_rings */
    int keep_largest;        /* 0 after prep_layout_init; see prep_decode_shower */
    int counts;              /* 0 after prep_layout_init; prep_layout_set_counts */
    int count_stick;         /* 0 after prep_layout_init; prep_layout_set_count_stick */
    int n_rings;             /* ring features (sum of n_r) when rings, else 0  */
    /* Layer k's features (its ring fractions, then its voxel fractions) are
     * x[n_u + block_off[k] .. + block_width[k]). */
    int block_off[GEO_MAX_LAYERS];
    int block_width[GEO_MAX_LAYERS];
} prep_layout;

/* Dequantization (p->dequantize = 1, the caller's choice).  A voxel under
 * the readout threshold (an empty one) of a layer with energy is encoded
 * as if it held dequant_top * threshold * u, u uniform in (0, 1) from (key,
 * voxel): the empty voxels then fill a range below the occupied ones (a
 * factor 1 / dequant_top under the threshold, a margin for a model's
 * errors) instead of sitting at one point (logit(alpha)), which a
 * continuous model cannot produce.  Layer energies (the stick-breaking)
 * stay exact, and fractions are of the true layer energy, so an occupied
 * voxel's value is exact and the noise comes on top.  Decoding multiplies
 * the fractions by the layer energy as they are (no renormalisation),
 * applies the threshold (which cuts the noise), and scales the survivors
 * to carry the layer's energy exactly: decode(encode(shower)) is the
 * shower. */

int prep_layout_init(prep_layout *p, const geo_geometry *g, float threshold_mev, gt_error *err);

/* Rings (p->rings = 1, through this call, which recomputes dim and the
 * blocks).  Each layer's energy is split first over its radial rings, then
 * each ring's over its angular voxels: layer k's block is
 *   [ logit-map(R_k,j / E_k) for its n_r rings ;
 *     logit-map(e_v / R_k,ring(v)) for its voxels, angle-major as stored ]
 * so dim = n_u + sum n_r + V.  Why: energy-weighted shapes (the radial
 * centre and width, the outer rings' share) are decided by a few voxels
 * each holding a small fraction; per voxel, that fraction is a rare upper
 * mode of a mostly-empty distribution, which a model smooths into many
 * small hits with too little energy.  A ring's fraction sums 16 (dataset 2)
 * voxels: occupied far more often, one smooth value per ring.  With
 * dequantization an empty ring (under the threshold) holds noise under 0.1
 * threshold as its fraction of the layer, and its voxels a noise split of
 * it; decoding applies the threshold and scales each ring's survivors to
 * the ring's energy, then the layer's to the layer's. */
void prep_layout_set_rings(prep_layout *p, int on);

/* Ring hit counts (p->counts = 1, through this call; needs rings, and
 * turning rings off turns them off).  Each layer's block gains, after its
 * ring fractions, one feature per ring: the number of its voxels at or over
 * the threshold (over 0 without dequantization), dequantized as count + u,
 * u uniform in (0, 1) from (key, V + n_rings + ring), so dim grows by
 * n_rings:
 *   [ ring fractions (n_r) ; ring hit counts (n_r) ; voxel fractions ]
 * With dequantization, an empty voxel of a hit ring is encoded just under
 * the ring's smallest hit (that hit's value times u) instead of far under
 * the threshold: the hits are picked by rank, so the empties need no gap.
 * Decoding keeps the floor(count) largest voxels of each ring (clamped to
 * [0, n_alpha]; ties to the lower angle) and zeroes the others before the
 * threshold.  A ring whose count reads 0 is empty: its energy goes to the
 * layer's other rings (keep_largest applies to rings that keep voxels).
 * Why: with the fractions alone,
 * whether a voxel is hit is decided by where a continuous value falls
 * against the threshold; a model's density spreads into the gap between
 * the dequantized empties and the smallest hits, and the generated showers
 * got both tiny spurious hits and too few real ones (the sparsity group
 * 20x its floor with everything else at 1.5-5x).  A count is one smooth
 * ordinal value per ring, the quantity the sparsity measures.  A recorded
 * ring's hits are its largest voxels, so decode(encode(shower)) is
 * unchanged. */
void prep_layout_set_counts(prep_layout *p, int on);

/* The ring hit counts stick-broken (p->count_stick = 1, through this call;
 * needs counts, and turning counts off turns it off; dim is unchanged).
 * A layer's n_r count features become
 *   [ N + u ; s_{n_r - 1} ; ... ; s_1 ]
 * N the layer's hits and s_j, in (0, 1), ring j's hits within those left
 * for it once the rings outside it took theirs: with L left and j rings
 * inside it (n_alpha voxels each), ring j holds n in [lo, hi], lo =
 * max(0, L - j n_alpha), hi = min(L, n_alpha), and s_j = (n - lo + u') /
 * (hi - lo + 1), u' uniform in (0.001, 0.999) from ring j's count noise
 * key.  Ring 0 takes what is left.  Decoding reads N = floor (clamped to
 * the layer's voxels) and each n = lo + floor(s (hi - lo + 1)) clamped to
 * its bounds, so any values give counts that add up to N and fit their
 * rings.  Why: a layer's hit total, the quantity the sparsity measures, is
 * then one value instead of a sum of n_r values each with its own error,
 * and an outer ring's hits (what the widths weigh most) are decided as a
 * share of a known total.  Outer rings first: the inner ones are full in
 * the dense layers, so the innermost taking the rest has the least to
 * decide; inner rings first measured no better than independent counts
 * (engine/model/README.md, "The rings' hits together"). */
void prep_layout_set_count_stick(prep_layout *p, int on);

/* logit(alpha + (1 - 2 alpha) p) for p clamped to [0, 1], and its inverse
 * (the result clamped to [0, 1]). */
double prep_logit_map(double p);
double prep_logit_unmap(double x);
/* The same with another alpha in (0, 0.5). */
double prep_logit_map_alpha(double p, double alpha);
double prep_logit_unmap_alpha(double x, double alpha);

/* Stage 1 target and its inverse. */
float prep_encode_energy(float e_dep, float e_inc);
float prep_decode_energy(float r, float e_inc);
float prep_condition_energy(float e_inc);
float prep_condition_energy_inverse(float c);

/* Stick-breaking of L layer energies into L-1 fractions (u_l = 0 once the
 * remaining energy is 0) and its inverse; e_dep is the sum of the layers. */
void prep_stick_break(const double *layer_e, int n_layers, double *u);
void prep_stick_join(const double *u, int n_layers, double e_dep, double *layer_e);

/* shower (V) -> x (dim), *e_dep = total energy.  Rejects NaN/negative. */
int prep_encode_shower(const prep_layout *p, const float *shower, float *x, float *e_dep,
                       gt_error *err);
/* The same with the dequantization noise of shower `key` when
 * p->dequantize (prep_encode_shower is key 0). */
int prep_encode_shower_keyed(const prep_layout *p, const float *shower, uint64_t key, float *x,
                             float *e_dep, gt_error *err);

/* x (dim) + E_dep -> shower (V) in MeV with the readout threshold applied.
 * Voxel fractions are renormalised per layer so every layer keeps exactly
 * the energy the stick-breaking gives it (before the threshold).  Last of
 * all, every voxel under p->readout_mev becomes 0 and its energy is
 * dropped, as a detector's readout drops it: the survivors' rescaling above
 * can take a voxel back under the threshold it passed, and a model's data
 * may show a higher threshold than threshold_mev; after this step every
 * voxel is 0 or at least readout_mev.  With
 * p->keep_largest, a ring or layer whose energy reaches the threshold but
 * left no voxel over it keeps its largest voxel, holding all of it (a
 * recorded shower never has energy without a hit, so a round trip is
 * unchanged; a model's thinly spread small energy is not read out as an
 * empty layer). */
void prep_decode_shower(const prep_layout *p, const float *x, float e_dep, float *shower);
/* Zeroes all but the `keep` largest of v[0 .. n) (n <= GEO_MAX_ALPHA_BINS;
 * ties: the lower index stays; a NaN stays unless keep is 0): how
 * decoding empties a ring down to its hit count. */
void prep_keep_top(double *v, int n, int keep);
/* prep_decode_shower of n rows (x: n x p->dim, showers: n x p->n_voxels),
 * spread over the OpenMP threads: each row is decoded alone, so the bytes
 * do not depend on the thread count.  The sampler's host work after the
 * device's: on a GPU it was the whole of giant sample's time, one core. */
void prep_decode_showers(const prep_layout *p, const float *x, const float *e_dep, int64_t n,
                         float *showers);
/* The first of n rows (each `per` floats) holding a NaN or an infinity, or
 * n when every value is finite.  Rows are scanned in parallel over the
 * OpenMP threads: the sampler checks everything a network gave before it
 * decodes, and on a GPU that scan is host time every batch waits for. */
int64_t prep_first_nonfinite_row(const float *x, int64_t n, int64_t per);

/* Batches: n rows, contiguous. */
int prep_encode_batch(const prep_layout *p, const float *showers, const float *e_inc,
                      int64_t n, float *x, float *energy_target, gt_error *err);

/* ------------------------------------------------------------------------ */
/* Standardisation statistics                                                */
/* ------------------------------------------------------------------------ */

typedef struct prep_stats {
    int dim;
    double *mean;
    double *std; /* floored: a constant feature gets std 1 */
} prep_stats;

/* Fits mean/std over the rows listed in `rows` (n_rows of them; NULL = all n). */
int prep_stats_fit(prep_stats *s, const float *x, int64_t n, int dim, const int64_t *rows,
                   int64_t n_rows, gt_error *err);
void prep_stats_free(prep_stats *s);
/* In place: x = (x - mean) / std, and back. */
void prep_stats_apply(const prep_stats *s, float *x, int64_t n);
void prep_stats_invert(const prep_stats *s, float *x, int64_t n);

/* Serialisation (stored with the model): "GTPS", version 1, dim, then
 * float64 mean and std, little-endian, then an FNV-1a 64 checksum. */
size_t prep_stats_size(const prep_stats *s);
int prep_stats_to_bytes(const prep_stats *s, uint8_t *buf, size_t cap, size_t *len,
                        gt_error *err);
int prep_stats_from_bytes(prep_stats *s, const uint8_t *buf, size_t len, gt_error *err);

#endif
