/* metric: separation power of feature histograms, FPD and KPD. */
#include "metric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "loader.h"
#include "rng.h"

/* LAPACK's symmetric eigensolver, from OpenBLAS (Fortran symbol). */
extern void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
                   double *w, double *work, const int *lwork, int *info);

double metric_separation_power(const double *h1, const double *h2, int nbins)
{
    double s1 = 0, s2 = 0;
    for (int i = 0; i < nbins; i++) {
        s1 += h1[i];
        s2 += h2[i];
    }
    if (s1 <= 0 && s2 <= 0)
        return 0.0;
    if (s1 <= 0 || s2 <= 0)
        return 1.0;
    double s = 0;
    for (int i = 0; i < nbins; i++) {
        double a = h1[i] / s1, b = h2[i] / s2;
        if (a + b > 0)
            s += (a - b) * (a - b) / (a + b);
    }
    return 0.5 * s;
}

void metric_histogram(const float *x, int64_t n, int64_t stride, const double *edges, int nbins,
                      double *counts)
{
    memset(counts, 0, (size_t)nbins * sizeof *counts);
    double lo = edges[0], hi = edges[nbins];
    for (int64_t i = 0; i < n; i++) {
        double v = x[i * stride];
        if (!(v >= lo && v <= hi))
            continue;
        int a = 0, b = nbins; /* edges[a] <= v < edges[b] */
        while (b - a > 1) {
            int m = (a + b) / 2;
            if (v >= edges[m])
                a = m;
            else
                b = m;
        }
        counts[a] += 1;
    }
}

int metric_feature_edges(const feat_info *info, const float *ref, int64_t n, int64_t stride,
                         double *edges, gt_error *err)
{
    int nb = info->nbins;
    if (nb < 1)
        return gt_error_set(err, GT_EINVAL, "feature %s has no bins", info->name);
    if (info->binning == FEAT_BINS_LINEAR) {
        for (int i = 0; i <= nb; i++)
            edges[i] = info->lo + (info->hi - info->lo) * i / nb;
        return GT_OK;
    }
    double mx = 0;
    for (int64_t i = 0; i < n; i++)
        if (ref[i * stride] > mx)
            mx = ref[i * stride];
    /* a layer the reference never reaches: one decade above the floor so
     * the bins stay valid; everything lands under it and S compares the
     * (empty) in-range parts */
    if (!(mx > info->lo * 1.0001))
        mx = info->lo * 10;
    double a = log10(info->lo), b = log10(mx);
    for (int i = 0; i <= nb; i++)
        edges[i] = pow(10.0, a + (b - a) * i / nb);
    edges[nb] = mx; /* exact, so the maximum itself is counted */
    return GT_OK;
}

static int metric_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void metric_summarise(const double *v, int n, const int *index, metric_summary *s,
                             double *scratch)
{
    memset(s, 0, sizeof *s);
    s->argmax = -1;
    if (n == 0) {
        s->mean = s->median = s->max = NAN;
        return;
    }
    double sum = 0;
    for (int i = 0; i < n; i++) {
        sum += v[i];
        scratch[i] = v[i];
        if (s->argmax < 0 || v[i] > s->max) {
            s->max = v[i];
            s->argmax = index ? index[i] : i;
        }
    }
    qsort(scratch, n, sizeof *scratch, metric_cmp_double);
    s->count = n;
    s->mean = sum / n;
    s->median = n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
}

void metric_report_free(metric_report *r)
{
    if (r) {
        free(r->sep);
        r->sep = NULL;
        free(r->constant);
        r->constant = NULL;
        r->n_constant = 0;
    }
}

/* ------------------------------------------------------------------------ */
/* FPD and KPD                                                               */
/* ------------------------------------------------------------------------ */

/* Symmetric square root of a (d x d, in place) through its eigenvalues;
 * negative eigenvalues (round-off) are clipped to 0. */
static int metric_sqrtm_sym(double *a, int d, double *w, double *work, int lwork, double *tmp,
                            gt_error *err)
{
    int info = 0;
    dsyev_("V", "U", &d, a, &d, w, work, &lwork, &info);
    if (info != 0)
        return gt_error_set(err, GT_EINVAL, "eigen-decomposition failed (info %d)", info);
    /* a holds eigenvectors in columns (column-major): sqrt = V diag(sqrt w) V^T */
    for (int j = 0; j < d; j++) {
        double s = w[j] > 0 ? sqrt(sqrt(w[j])) : 0.0;
        for (int i = 0; i < d; i++)
            tmp[(size_t)j * d + i] = a[(size_t)j * d + i] * s;
    }
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, d, d, d, 1.0, tmp, d, tmp, d, 0.0, a, d);
    return GT_OK;
}

/* Mean and covariance of rows idx (n of them) of x (dim d). */
static void metric_moments(const double *x, const int64_t *idx, int64_t n, int d, double *mu,
                           double *cov, double *centred)
{
    memset(mu, 0, (size_t)d * sizeof *mu);
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < d; k++)
            mu[k] += x[idx[i] * d + k];
    for (int k = 0; k < d; k++)
        mu[k] /= (double)n;
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < d; k++)
            centred[i * d + k] = x[idx[i] * d + k] - mu[k];
    cblas_dsyrk(CblasColMajor, CblasUpper, CblasNoTrans, d, (int)n, 1.0 / (double)(n - 1),
                centred, d, 0.0, cov, d);
    for (int j = 0; j < d; j++) /* mirror the upper triangle */
        for (int i = j + 1; i < d; i++)
            cov[(size_t)j * d + i] = cov[(size_t)i * d + j];
}

int metric_fpd(const double *xa, int64_t na, const double *xb, int64_t nb, int d, double *fpd,
               double *fpd_err, gt_error *err)
{
    *fpd = NAN;
    if (fpd_err)
        *fpd_err = NAN;
    double xs[10], ys[10];
    int64_t nmax = na < nb ? na : nb;
    if (nmax > 50000)
        nmax = 50000;
    if (d < 1 || nmax < 10)
        return gt_error_set(err, GT_EINVAL, "FPD: %lld rows are too few for %d features",
                            (long long)nmax, d);
    size_t dd = (size_t)d * d;
    int lwork = 3 * d + 64;
    double *mu_a = malloc(d * sizeof(double)), *mu_b = malloc(d * sizeof(double));
    double *ca = malloc(dd * sizeof(double)), *cb = malloc(dd * sizeof(double));
    double *m = malloc(dd * sizeof(double)), *tmp = malloc(dd * sizeof(double));
    double *w = malloc(d * sizeof(double)), *work = malloc(lwork * sizeof(double));
    double *centred = malloc((size_t)nmax * d * sizeof(double));
    int64_t *ia = malloc(na * sizeof(int64_t)), *ib = malloc(nb * sizeof(int64_t));
    int rc = GT_OK;
    if (!mu_a || !mu_b || !ca || !cb || !m || !tmp || !w || !work || !centred || !ia || !ib) {
        rc = gt_error_set(err, GT_ENOMEM, "FPD: out of memory");
        goto done;
    }
    /* 5 subset sizes, 2 random subsets each; fit FPD = c + k / N */
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int pts = 0;
    for (int p = 0; p < 5; p++) {
        int64_t n = nmax * (p + 1) / 5;
        for (int rep = 0; rep < 2; rep++) {
            for (int64_t i = 0; i < na; i++)
                ia[i] = i;
            for (int64_t i = 0; i < nb; i++)
                ib[i] = i;
            loader_shuffle(ia, na, 0x465044, (uint64_t)(2 * p + rep));
            loader_shuffle(ib, nb, 0x465045, (uint64_t)(2 * p + rep));
            metric_moments(xa, ia, n, d, mu_a, ca, centred);
            metric_moments(xb, ib, n, d, mu_b, cb, centred);
            double dist = 0, tr = 0;
            for (int k = 0; k < d; k++) {
                dist += (mu_a[k] - mu_b[k]) * (mu_a[k] - mu_b[k]);
                tr += ca[(size_t)k * d + k] + cb[(size_t)k * d + k];
            }
            /* Tr sqrt(S_a S_b) = Tr sqrt(S_a^1/2 S_b S_a^1/2), a symmetric PSD matrix */
            memcpy(m, ca, dd * sizeof(double));
            if ((rc = metric_sqrtm_sym(m, d, w, work, lwork, tmp, err)))
                goto done;
            cblas_dsymm(CblasColMajor, CblasLeft, CblasUpper, d, d, 1.0, cb, d, m, d, 0.0, tmp,
                        d);
            cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, d, d, d, 1.0, m, d, tmp, d,
                        0.0, ca, d);
            int info = 0;
            dsyev_("N", "U", &d, ca, &d, w, work, &lwork, &info);
            if (info) {
                rc = gt_error_set(err, GT_EINVAL, "FPD: eigenvalues failed (info %d)", info);
                goto done;
            }
            double trs = 0;
            for (int k = 0; k < d; k++)
                trs += w[k] > 0 ? sqrt(w[k]) : 0.0;
            double f = dist + tr - 2 * trs;
            double x = 1.0 / (double)n;
            xs[pts] = x;
            ys[pts] = f;
            sx += x;
            sy += f;
            sxx += x * x;
            sxy += x * f;
            pts++;
        }
    }
    double den = pts * sxx - sx * sx;
    double slope = den > 0 ? (pts * sxy - sx * sy) / den : 0;
    *fpd = (sy - slope * sx) / pts;
    /* the intercept's standard error from the scatter about the line (what
     * JetNet's curve_fit reports): s^2 Sxx / (n Sxx - Sx^2), s^2 the
     * residual variance with 2 fitted parameters */
    if (fpd_err && den > 0) {
        double ss = 0;
        for (int i = 0; i < pts; i++) {
            double r = ys[i] - (*fpd + slope * xs[i]);
            ss += r * r;
        }
        *fpd_err = sqrt(ss / (pts - 2) * sxx / den);
    }
done:
    free(mu_a);
    free(mu_b);
    free(ca);
    free(cb);
    free(m);
    free(tmp);
    free(w);
    free(work);
    free(centred);
    free(ia);
    free(ib);
    return rc;
}

/* The q-th percentile (0..100) of sorted v[n], interpolated linearly
 * between neighbours as numpy's default does. */
static double metric_percentile(const double *v, int n, double q)
{
    double pos = q / 100.0 * (n - 1);
    int i = (int)floor(pos);
    if (i >= n - 1)
        return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

int metric_kpd(const double *xa, int64_t na, const double *xb, int64_t nb, int d,
               int64_t block, int n_blocks, uint64_t seed, double *kpd, double *kpd_err,
               gt_error *err)
{
    *kpd = *kpd_err = NAN;
    /* At most half the smaller sample per batch, so the batches are
     * different subsets: a batch of the whole sample gives every batch the
     * same value and a spread of 0 (what `giant eval` printed before, for
     * samples of up to 2 000 showers).  Rows are drawn without replacement
     * within a batch, so each batch's estimate stays unbiased (JetNet draws
     * with replacement, whose repeated rows bias the within-sample terms
     * at these sizes). */
    int64_t half = (na < nb ? na : nb) / 2;
    if (block > half)
        block = half;
    if (d < 1 || block < 2 || n_blocks < 1)
        return gt_error_set(err, GT_EINVAL, "KPD: too few rows (%lld)", (long long)block);
    int64_t m = block;
    double *a = malloc((size_t)m * d * sizeof(double)), *b = malloc((size_t)m * d * sizeof(double));
    double *k = malloc((size_t)m * m * sizeof(double));
    int64_t *ia = malloc(na * sizeof(int64_t)), *ib = malloc(nb * sizeof(int64_t));
    double *vals = malloc(n_blocks * sizeof(double));
    int rc = GT_OK;
    if (!a || !b || !k || !ia || !ib || !vals) {
        rc = gt_error_set(err, GT_ENOMEM, "KPD: out of memory");
        goto done;
    }
    for (int t = 0; t < n_blocks; t++) {
        for (int64_t i = 0; i < na; i++)
            ia[i] = i;
        for (int64_t i = 0; i < nb; i++)
            ib[i] = i;
        loader_shuffle(ia, na, seed ^ 0x4b5044, (uint64_t)t);
        loader_shuffle(ib, nb, seed ^ 0x4b5045, (uint64_t)t);
        for (int64_t i = 0; i < m; i++) {
            memcpy(a + i * d, xa + ia[i] * d, d * sizeof(double));
            memcpy(b + i * d, xb + ib[i] * d, d * sizeof(double));
        }
        /* kernel sums: K = (X Y^T / d + 1)^4, JetNet's degree */
        double sums[3];
        const double *p[3][2] = {{a, a}, {b, b}, {a, b}};
        for (int q = 0; q < 3; q++) {
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)m, d, 1.0 / d,
                        p[q][0], d, p[q][1], d, 0.0, k, (int)m);
            double s = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < m; j++) {
                    if (q < 2 && i == j)
                        continue; /* unbiased: no self-pairs */
                    double v = k[i * m + j] + 1.0;
                    v *= v;
                    s += v * v;
                }
            sums[q] = s;
        }
        vals[t] = sums[0] / (double)(m * (m - 1)) + sums[1] / (double)(m * (m - 1)) -
                  2.0 * sums[2] / (double)(m * m);
    }
    /* JetNet's summary: the median over batches, and half the range
     * between the 16.275th and 83.725th percentiles (one sigma of a batch's
     * value for a normal spread) */
    qsort(vals, n_blocks, sizeof *vals, metric_cmp_double);
    *kpd = metric_percentile(vals, n_blocks, 50.0);
    *kpd_err = n_blocks > 1 ? 0.5 * (metric_percentile(vals, n_blocks, 83.725) -
                                     metric_percentile(vals, n_blocks, 16.275))
                            : 0.0;
done:
    free(a);
    free(b);
    free(k);
    free(ia);
    free(ib);
    free(vals);
    return rc;
}

/* The CaloChallenge FPD/KPD vector of one shower from its features. */
static int metric_distance_dim(const feat_layout *f)
{
    int d = 1;
    for (int j = 0; j < f->n_features; j++) {
        feat_group g = f->info[j].group;
        if (g == FEAT_E_LAYER || g == FEAT_EC_ETA || g == FEAT_EC_PHI || g == FEAT_WIDTH_ETA ||
            g == FEAT_WIDTH_PHI)
            d++;
    }
    return d;
}

/* The feature of each column of that vector (-1: log10 E_inc). */
static void metric_distance_features(const feat_layout *f, int *col)
{
    int k = 0;
    col[k++] = -1;
    for (int j = 0; j < f->n_features; j++) {
        feat_group g = f->info[j].group;
        if (g == FEAT_E_LAYER || g == FEAT_EC_ETA || g == FEAT_EC_PHI || g == FEAT_WIDTH_ETA ||
            g == FEAT_WIDTH_PHI)
            col[k++] = j;
    }
}

static void metric_distance_rows(const feat_layout *f, const float *feats, const float *e,
                                 int64_t n, int d, double *out)
{
    for (int64_t i = 0; i < n; i++) {
        const float *r = feats + i * (int64_t)f->n_features;
        double *o = out + i * d;
        int k = 0;
        o[k++] = log10(e[i] > 0 ? e[i] : 1e-8);
        for (int j = 0; j < f->n_features; j++) {
            switch (f->info[j].group) {
            case FEAT_E_LAYER:
                o[k++] = log10(r[j] + 1e-8);
                break;
            case FEAT_EC_ETA:
            case FEAT_EC_PHI:
            case FEAT_WIDTH_ETA:
            case FEAT_WIDTH_PHI:
                o[k++] = r[j] / 100.0;
                break;
            default:
                break;
            }
        }
    }
}

/* Whether column k of x (n rows of d) is constant: its range at most
 * 1e-6 of (1 + its largest magnitude), so round-off (the ~1e-8 mm width of
 * a layer whose energy sits in one voxel) counts as constant too. */
static int metric_column_constant(const double *x, int64_t n, int d, int k)
{
    double lo = x[k], hi = x[k];
    for (int64_t i = 1; i < n; i++) {
        double v = x[i * d + k];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    double mag = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
    return hi - lo <= 1e-6 * (1.0 + mag);
}

/* Drops the columns constant in either sample from xa and xb (in place,
 * rows repacked) and lists their features in out->constant.  A column
 * constant in a sample makes that sample's covariance singular and,
 * scaled by its maximum, turns round-off into a feature of size 1; it
 * carries no shape a distance should weigh.  (Where the two samples hold
 * different constants, the separation power of that feature shows it.)
 * Returns the columns kept. */
static int metric_drop_constant(const feat_layout *f, double *xa, int64_t na, double *xb,
                                int64_t nb, int d, metric_report *out, gt_error *err)
{
    int *col = malloc(d * sizeof *col), *keep = malloc(d * sizeof *keep);
    out->constant = malloc(d * sizeof *out->constant);
    if (!col || !keep || !out->constant) {
        free(col);
        free(keep);
        return gt_error_set(err, GT_ENOMEM, "FPD/KPD: out of memory"), -1;
    }
    metric_distance_features(f, col);
    int kept = 0;
    for (int k = 0; k < d; k++) {
        if (metric_column_constant(xa, na, d, k) || metric_column_constant(xb, nb, d, k))
            out->constant[out->n_constant++] = col[k];
        else
            keep[kept++] = k;
    }
    if (kept < d) {
        for (int64_t i = 0; i < na; i++)
            for (int c = 0; c < kept; c++)
                xa[i * kept + c] = xa[i * d + keep[c]];
        for (int64_t i = 0; i < nb; i++)
            for (int c = 0; c < kept; c++)
                xb[i * kept + c] = xb[i * d + keep[c]];
    }
    free(col);
    free(keep);
    return kept;
}

static int metric_distances(const feat_layout *f, const float *fa, const float *ea, int64_t na,
                            const float *fb, const float *eb, int64_t nb, uint64_t seed,
                            metric_report *out, gt_error *err)
{
    int d = metric_distance_dim(f), d_all = d;
    double *xa = malloc((size_t)na * d * sizeof(double));
    double *xb = malloc((size_t)nb * d * sizeof(double));
    double *scale = calloc(d, sizeof(double));
    int rc = GT_OK;
    if (!xa || !xb || !scale) {
        rc = gt_error_set(err, GT_ENOMEM, "FPD/KPD: out of memory");
        goto done;
    }
    metric_distance_rows(f, fa, ea, na, d, xa);
    metric_distance_rows(f, fb, eb, nb, d, xb);
    if ((d = metric_drop_constant(f, xa, na, xb, nb, d, out, err)) < 0) {
        rc = err ? err->code : GT_ENOMEM;
        goto done;
    }
    /* FPD/KPD need clearly more showers than features (covariances of
     * subsets down to a fifth of the sample), counted over the whole
     * vector so whether they are computed does not hang on the data;
     * below that, or with nothing left to compare, they stay NAN */
    if (d < 1 || na < 2 * (int64_t)d_all + 10 || nb < 2 * (int64_t)d_all + 10)
        goto done;
    /* jetnet divides by the reference's max |x|; we take the max over both
     * samples, because a feature the reference has (almost) only at 0 (the
     * width of a one-voxel layer is ~1e-8 mm of round-off) would otherwise
     * be blown up by 1e7 and swamp every other feature */
    for (int64_t i = 0; i < nb; i++)
        for (int k = 0; k < d; k++)
            if (fabs(xb[i * d + k]) > scale[k])
                scale[k] = fabs(xb[i * d + k]);
    for (int64_t i = 0; i < na; i++)
        for (int k = 0; k < d; k++)
            if (fabs(xa[i * d + k]) > scale[k])
                scale[k] = fabs(xa[i * d + k]);
    for (int k = 0; k < d; k++)
        scale[k] = scale[k] > 0 ? 1.0 / scale[k] : 1.0;
    for (int64_t i = 0; i < na; i++)
        for (int k = 0; k < d; k++)
            xa[i * d + k] *= scale[k];
    for (int64_t i = 0; i < nb; i++)
        for (int k = 0; k < d; k++)
            xb[i * d + k] *= scale[k];
    double fpd, fpd_err, kpd, kerr;
    if ((rc = metric_fpd(xa, na, xb, nb, d, &fpd, &fpd_err, err)))
        goto done;
    if ((rc = metric_kpd(xa, na, xb, nb, d, 2000, 10, seed, &kpd, &kerr, err)))
        goto done;
    out->fpd = fpd * 1e3;
    out->fpd_err = fpd_err * 1e3;
    out->kpd = kpd * 1e3;
    out->kpd_err = kerr * 1e3;
done:
    free(xa);
    free(xb);
    free(scale);
    return rc;
}

int metric_compare(const feat_layout *f, const float *fa, const float *ea, int64_t na,
                   const float *fb, const float *eb, int64_t nb, uint64_t seed,
                   metric_report *out, gt_error *err)
{
    memset(out, 0, sizeof *out);
    out->fpd = out->fpd_err = out->kpd = out->kpd_err = NAN;
    if (na < 1 || nb < 1)
        return gt_error_set(err, GT_EINVAL, "both samples need showers (%lld and %lld)",
                            (long long)na, (long long)nb);
    int nf = f->n_features, maxb = 0;
    for (int j = 0; j < nf; j++)
        if (f->info[j].nbins > maxb)
            maxb = f->info[j].nbins;
    out->n_features = nf;
    out->sep = calloc(nf, sizeof(double));
    double *edges = malloc((maxb + 1) * sizeof(double));
    double *h1 = malloc(maxb * sizeof(double)), *h2 = malloc(maxb * sizeof(double));
    double *v = malloc(nf * sizeof(double)), *scratch = malloc(nf * sizeof(double));
    int *idx = malloc(nf * sizeof(int));
    int rc = GT_OK;
    if (!out->sep || !edges || !h1 || !h2 || !v || !scratch || !idx) {
        rc = gt_error_set(err, GT_ENOMEM, "metric: out of memory");
        goto done;
    }
    for (int j = 0; j < nf; j++) {
        const feat_info *fi = &f->info[j];
        if ((rc = metric_feature_edges(fi, fb + j, nb, nf, edges, err)))
            goto done;
        metric_histogram(fa + j, na, nf, edges, fi->nbins, h1);
        metric_histogram(fb + j, nb, nf, edges, fi->nbins, h2);
        out->sep[j] = metric_separation_power(h1, h2, fi->nbins);
    }
    for (int g = 0; g < FEAT_N_GROUPS; g++) {
        int n = 0;
        for (int j = 0; j < nf; j++)
            if ((int)f->info[j].group == g) {
                v[n] = out->sep[j];
                idx[n++] = j;
            }
        metric_summarise(v, n, idx, &out->group[g], scratch);
    }
    metric_summarise(out->sep, nf, NULL, &out->all, scratch);
    if (ea && eb)
        rc = metric_distances(f, fa, ea, na, fb, eb, nb, seed, out, err);
done:
    free(edges);
    free(h1);
    free(h2);
    free(v);
    free(scratch);
    free(idx);
    if (rc)
        metric_report_free(out);
    return rc;
}
