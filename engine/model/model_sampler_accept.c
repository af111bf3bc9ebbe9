/* model_sampler_accept: a learned acceptance test applied while sampling
 * (model_sampler_set_accept; the test itself is model_accept.h): every
 * shower scored on the host as it is made, kept with the test's
 * probability against a uniform of (seed, row, draw), the rows not kept
 * drawn again as requests of their own until every row is kept. */
#include "model_sampler_internal.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "nn_rng.h"

int model_sampler_set_accept(model_sampler *s, const void *blob, size_t len, gt_error *err)
{
    model_accept_free(&s->accept);
    feat_layout_free(&s->feats);
    free(s->feat_h);
    free(s->row_h);
    free(s->score_h);
    s->feat_h = s->row_h = s->score_h = NULL;
    s->has_accept = 0;
    if (!blob)
        return GT_OK;
    float threshold = 0;
    int rc;
    if ((rc = model_accept_unpack(blob, len, &s->accept, err)) ||
        (rc = model_geometry_threshold(&s->geo, &threshold, err)) ||
        (rc = feat_layout_init(&s->feats, &s->geo, threshold, err)))
        goto fail;
    if (s->accept.net.d != feat_classifier_width(&s->feats)) {
        rc = gt_error_set(err, GT_EINVAL,
                          "the acceptance test reads %d features a shower; this geometry has %d",
                          s->accept.net.d, feat_classifier_width(&s->feats));
        goto fail;
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const int H = s->accept.net.hidden, d = s->accept.net.d;
    s->feat_h = malloc((size_t)threads * s->feats.n_features * sizeof(float));
    s->row_h = malloc((size_t)threads * d * sizeof(float));
    s->score_h = malloc((size_t)threads * 2 * (d > H ? d : H) * sizeof(float));
    if (!s->feat_h || !s->row_h || !s->score_h) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory for the acceptance test");
        goto fail;
    }
    s->accept_threads = threads;
    s->has_accept = 1;
    return GT_OK;
fail:
    model_sampler_set_accept(s, NULL, 0, NULL);
    return rc;
}

double model_sampler_draws_per_shower(const model_sampler *s) { return s->draws_per_shower; }

/* Whether the acceptance test keeps row i of q: the shower's classifier
 * row scored on the host, against a uniform of (seed, row, draw).  The
 * last draw allowed is kept whatever it scores. */
static int accept_keeps(const model_sampler *s, const model_sample_request *q, int64_t i,
                        int thread)
{
    if (q->draw + 1 >= (uint32_t)s->accept.max_attempts)
        return 1;
    const int d = s->accept.net.d, H = s->accept.net.hidden;
    float *feat = s->feat_h + (size_t)thread * s->feats.n_features;
    float *row = s->row_h + (size_t)thread * d;
    float *scratch = s->score_h + (size_t)thread * 2 * (d > H ? d : H);
    feat_compute(&s->feats, q->showers + (size_t)i * s->geo.n_voxels, q->e_inc[i], feat);
    feat_classifier_row(&s->feats, feat, q->e_inc[i], row);
    double z = model_accept_logit(&s->accept, row, scratch);
    uint32_t w[4];
    nn_rng_block(q->seed, draw_stream(ACCEPT_STREAM, q->draw), (uint64_t)(q->row0 + i), w);
    return (double)w[0] * (1.0 / 4294967296.0) < model_accept_keep_probability(&s->accept, z);
}

/* Under an acceptance test: every row drawn once, then the rows not kept
 * drawn again, as requests of their own (runs of consecutive rows, the
 * next draw), until every row is kept.  The showers land in the caller's
 * buffers, each row's at its place. */
int model_sampler_accept_run(model_sampler *s, model_sample_request *reqs, int n_reqs, int steps,
                             double *scored, gt_error *err)
{
    int64_t total = 0;
    for (int r = 0; r < n_reqs; r++)
        total += reqs[r].n > 0 ? reqs[r].n : 0;
    /* a round's requests: the caller's, then at most one run per row */
    size_t cap = (size_t)(total > n_reqs ? total : n_reqs) + 1;
    uint8_t *keep = malloc((size_t)total + 1);
    model_sample_request *cur = malloc(cap * sizeof *cur), *next = malloc(cap * sizeof *next);
    if (!keep || !cur || !next) {
        free(keep);
        free(cur);
        free(next);
        return gt_error_set(err, GT_ENOMEM, "out of memory for the acceptance test's redraws");
    }
    memcpy(cur, reqs, (size_t)n_reqs * sizeof *cur);
    int n_cur = n_reqs, rc = model_sampler_batches(s, cur, n_cur, steps, err);
    while (rc == GT_OK && n_cur > 0) {
        /* every row of cur scored: rows are independent, so in parallel */
        int64_t at = 0;
        for (int r = 0; r < n_cur; r++) {
            const model_sample_request *q = &cur[r];
            const int64_t n = q->n > 0 ? q->n : 0;
#pragma omp parallel for schedule(static) num_threads(s->accept_threads)
            for (int64_t i = 0; i < n; i++) {
                int thread = 0;
#ifdef _OPENMP
                thread = omp_get_thread_num();
#endif
                keep[at + i] = (uint8_t)accept_keeps(s, q, i, thread);
            }
            at += n;
        }
        *scored += (double)at;
        int n_next = 0;
        at = 0;
        for (int r = 0; r < n_cur; r++) {
            const model_sample_request *q = &cur[r];
            for (int64_t i = 0; i < q->n;) {
                if (keep[at + i]) {
                    i++;
                    continue;
                }
                int64_t j = i + 1;
                while (j < q->n && !keep[at + j])
                    j++;
                next[n_next++] = (model_sample_request){
                    q->e_inc + i,
                    j - i,
                    q->seed,
                    q->row0 + i,
                    q->showers + (size_t)i * s->geo.n_voxels,
                    q->e_dep ? q->e_dep + i : NULL,
                    q->draw + 1,
                };
                i = j;
            }
            at += q->n > 0 ? q->n : 0;
        }
        if (n_next == 0)
            break;
        model_sample_request *t = cur;
        cur = next;
        next = t;
        n_cur = n_next;
        rc = model_sampler_batches(s, cur, n_cur, steps, err);
    }
    free(keep);
    free(cur);
    free(next);
    return rc;
}
