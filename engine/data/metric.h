/* metric: how close two samples of showers are, the CaloChallenge way.
 *
 * Each high-level feature (feat.h) of a candidate sample A and a reference
 * sample B is histogrammed with shared bins (linear ranges from the
 * CaloChallenge evaluation code; energy histograms use 39 log bins from the
 * lower edge up to the reference's maximum).  Like numpy's density=True,
 * each histogram is normalised over the entries inside its range, then
 *     S = 1/2 sum_bins (h_A - h_B)^2 / (h_A + h_B)       (0 same, 1 disjoint)
 * Summaries: mean, median and max of S per feature group and overall. */
#ifndef METRIC_H
#define METRIC_H

#include <stdint.h>

#include "feat.h"
#include "gt_error.h"

typedef struct metric_summary {
    int count;
    double mean, median, max;
    int argmax; /* feature index of the max */
} metric_summary;

typedef struct metric_report {
    int n_features;
    double *sep;                          /* per feature              */
    metric_summary group[FEAT_N_GROUPS];  /* per feature group        */
    metric_summary all;                   /* over every feature       */
    /* Frechet and kernel physics distances on the standardised features
     * (x 1e3 as CaloChallenge reports them), each with its uncertainty;
     * NAN when not computed. */
    double fpd, fpd_err, kpd, kpd_err;
    /* Features of the FPD/KPD vector left out of them because they are
     * constant in either sample (an always-empty layer, a fixed incident
     * energy): feature indices, -1 for log10 E_inc. */
    int *constant;
    int n_constant;
} metric_report;

/* S of two histograms given as raw counts (each normalised to sum 1 here;
 * an empty histogram against a non-empty one gives 1, two empty give 0). */
double metric_separation_power(const double *h1, const double *h2, int nbins);

/* Counts x[i * stride] (n values) into nbins bins with the given edges
 * (nbins + 1, ascending); values outside [edges[0], edges[nbins]] and NaN
 * are not counted; the last bin includes its upper edge (numpy). */
void metric_histogram(const float *x, int64_t n, int64_t stride, const double *edges, int nbins,
                      double *counts);

/* Bin edges of feature j for reference values ref[i * stride] (n values). */
int metric_feature_edges(const feat_info *info, const float *ref, int64_t n, int64_t stride,
                         double *edges, gt_error *err);

/* Separation power of every feature: fa (na x n_features, candidate), fb
 * (nb x n_features, reference).  When ea and eb (incident energies of the
 * two samples) are given, also FPD and KPD on the CaloChallenge feature
 * vector [log10 E_inc, log10(E_layer + 1e-8), EC_eta/100, EC_phi/100,
 * width_eta/100, width_phi/100], each feature divided by its maximum
 * absolute value over both samples (jetnet uses the reference's alone,
 * which explodes on features the reference has only at ~0).  Columns
 * constant in either sample (range within 1e-6 of their size: an
 * always-empty layer, a fixed incident energy, widths that are round-off)
 * are left out and listed in out->constant.  FPD and KPD stay NAN when
 * either sample has fewer than 2 d + 10 showers (d = length of the whole
 * vector: 226 for dataset 2) or no column is left. */
int metric_compare(const feat_layout *f, const float *fa, const float *ea, int64_t na,
                   const float *fb, const float *eb, int64_t nb, uint64_t seed,
                   metric_report *out, gt_error *err);
void metric_report_free(metric_report *r);

/* FPD: Frechet distance between Gaussians fitted to the two samples
 * (|mu_a - mu_b|^2 + Tr(S_a + S_b - 2 (S_a^1/2 S_b S_a^1/2)^1/2), square
 * roots by LAPACK dsyev), evaluated on random subsets of 5 sizes up to
 * min(na, nb, 50000), two each, and extrapolated linearly in 1/N to
 * N = infinity; *fpd_err (may be NULL) is the standard error of that
 * intercept from the scatter of the 10 points about the line (JetNet's).
 * KPD: unbiased MMD^2 with the polynomial kernel (x.y/d + 1)^4 (JetNet's
 * degree) on n_blocks batches of min(block, min(na, nb) / 2) rows, each a
 * different random subset of each sample (no row twice in a batch); the
 * median over batches, and as the error half the distance between their
 * 16.275th and 83.725th percentiles (JetNet's).  Rows of dimension d,
 * row-major. */
int metric_fpd(const double *xa, int64_t na, const double *xb, int64_t nb, int d, double *fpd,
               double *fpd_err, gt_error *err);
int metric_kpd(const double *xa, int64_t na, const double *xb, int64_t nb, int d,
               int64_t block, int n_blocks, uint64_t seed, double *kpd, double *kpd_err,
               gt_error *err);

#endif
