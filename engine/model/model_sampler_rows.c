/* model_sampler_rows: a device batch's rows (model_sampler_internal.h):
 * which piece of which request a row is, the starting noise keyed by
 * (request seed, row) alone, the host's check that names the shower behind
 * a value that is not finite, and the beam-axis turn of sample.symmetrize. */
#include "model_sampler_internal.h"

#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "nn_rng.h"

/* The piece that holds batch row i. */
int model_sampler_piece_of(const model_sampler_piece *p, int np, int i)
{
    int k = 0;
    while (k < np - 1 && !(i >= p[k].at && i < p[k].at + p[k].rows))
        k++;
    return k;
}

/* GT_EINVAL naming the shower behind the first of `rows` rows of `per`
 * host floats that is not finite (row r is batch row idx[r], or r when idx
 * is NULL), with `what` happened to it.  The trunks' per-evaluation check
 * is off (model_sampler.c, load_net): what a network reads comes from here
 * (conditions) or from the noise and the networks' own outputs, which are
 * checked when they come back to the host after each stage, so a NaN is
 * still an error rather than a NaN shower. */
int model_sampler_check_finite(const model_sampler_piece *p, int np, const float *x, int rows,
                               int per, const int *idx, const char *what, gt_error *err)
{
    int64_t first = prep_first_nonfinite_row(x, rows, per);
    if (first == rows)
        return GT_OK;
    int row = idx ? idx[first] : (int)first, k = model_sampler_piece_of(p, np, row);
    return gt_error_set(err, GT_EINVAL, "request %d, shower %lld: %s", p[k].req,
                        (long long)(p[k].first + (row - p[k].at)), what);
}

/* Starting noise: row `row` of a request is filled from (seed, stream) at
 * block offset row * ceil(D/4), so a row's noise depends only on (seed, row),
 * however requests are split and batched.  A piece's rows are consecutive
 * rows of one request: one rand_rows call each (one launch on a GPU). */
int model_sampler_fill_noise(model_sampler *s, const model_sample_request *reqs,
                             const model_sampler_piece *p, int np, int stage, int D, gt_error *err)
{
    const uint64_t per_row = nn_rng_blocks((uint64_t)D);
    for (int i = 0; i < np; i++) {
        const model_sample_request *q = &reqs[p[i].req];
        nn_tensor x = nn_f32(s->x + (size_t)p[i].at * D, p[i].rows, D);
        int rc = nn_rand_rows(s->b, x, NN_DIST_NORMAL, 0.0f, noise_sd(s, stage), q->seed,
                              draw_stream(SAMPLE_STREAM + (uint64_t)stage, q->draw),
                              (uint64_t)(q->row0 + p[i].first),
                              per_row, err);
        if (rc)
            return rc;
    }
    return GT_OK;
}

/* sample.symmetrize: each decoded shower turned by one of the geometry's
 * rotations about the beam axis and mirrored, both drawn from (request
 * seed, row) on their own stream, so a row's bytes still depend on nothing
 * but (seed, row).  Why: a model's small angular biases (one angular bin
 * hit a few percent more often than another, the same in every shower) are
 * spread evenly, as the reference's are; the low-level classifier found
 * exactly those (engine/model/README.md, "The beam axis's symmetry"). */
void model_sampler_turn(model_sampler *s, const model_sample_request *q, int64_t first, int rows)
{
    const int V = s->geo.n_voxels, G = geo_rotation_count(&s->geo);
    /* rows are independent, so on every core: serial, the turning (about
     * 215 000 dataset-2 showers/s on one core) would be a third of the
     * host's decoding phase on 16 cores, where decoding (about 7 500 a
     * core) runs on all of them */
#pragma omp parallel for schedule(static) num_threads(s->turn_threads) if (rows >= 16)
    for (int r = 0; r < rows; r++) {
        int thread = 0;
#ifdef _OPENMP
        thread = omp_get_thread_num();
#endif
        uint32_t w[4];
        nn_rng_block(q->seed, draw_stream(TURN_STREAM, q->draw), (uint64_t)(q->row0 + first + r),
                     w);
        int k = (int)(((uint64_t)w[0] * (uint64_t)G) >> 32), mirror = (int)(w[1] >> 31);
        float *shower = q->showers + (size_t)(first + r) * V;
        if (!k && !mirror)
            continue;
        float *tmp = s->turn_h + (size_t)thread * V;
        geo_turn_shower(&s->geo, shower, tmp, k, mirror);
        memcpy(shower, tmp, (size_t)V * sizeof(float));
    }
}
