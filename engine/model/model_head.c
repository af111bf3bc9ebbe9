#include "model_head.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct model_head {
    nn_backend *b;
    int L, dim, batch;
    double *u_mean, *u_std; /* host [L - 1] */
    double *f_mean, *f_std; /* host [L] */
    float *u_scale, *u_shift, *f_scale, *f_shift; /* backend: the two affine maps */
    float *z, *f;           /* backend [batch, L - 1], [batch, L] */
    float *zh;              /* host [L]: row scratch */
};

void model_head_destroy(model_head *h)
{
    if (!h)
        return;
    float *dev[] = {h->u_scale, h->u_shift, h->f_scale, h->f_shift, h->z, h->f};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        nn_free(h->b, dev[i]);
    free(h->u_mean);
    free(h->u_std);
    free(h->f_mean);
    free(h->f_std);
    free(h->zh);
    free(h);
}

int model_head_width(const model_head *h) { return h->dim + 1; }

/* The fractions of one row (unstandardised), with the device's fp32
 * arithmetic: z = (float)std_u * x + (float)mean_u, then the product. */
static void fractions(const model_head *h, const float *x, float *f, float *z)
{
    for (int l = 0; l < h->L - 1; l++)
        z[l] = (float)h->u_std[l] * x[l] + (float)h->u_mean[l];
    nn_sb_fwd_row(z, f, h->L);
}

void model_head_fractions_host(const model_head *h, const float *x, float *f)
{
    fractions(h, x, f, h->zh);
}

void model_head_row_host(const model_head *h, const float *x, float *out)
{
    const int L = h->L;
    fractions(h, x, out, h->zh);
    for (int l = 0; l < L; l++)
        out[l] = (float)(1.0 / h->f_std[l]) * out[l] + (float)(-h->f_mean[l] / h->f_std[l]);
    memcpy(out + L, x + L - 1, (size_t)(h->dim - (L - 1)) * sizeof(float));
}

static int upload(model_head *h, float **dev, const float *src, int n, gt_error *err)
{
    int rc = nn_alloc(h->b, (size_t)n * sizeof(float), (void **)dev, err);
    return rc ? rc : nn_copy_h2d(h->b, *dev, src, (size_t)n * sizeof(float), err);
}

int model_head_create(nn_backend *b, int n_layers, int dim, const double *u_mean,
                      const double *u_std, const float *x_train, int n_train, int batch,
                      model_head **out, gt_error *err)
{
    *out = NULL;
    const int L = n_layers;
    if (L < 2 || dim < L - 1 || n_train < 1 || batch < 1 || !u_mean || !u_std || !x_train)
        return gt_error_set(err, GT_EINVAL, "model_head: %d layers, dim %d, %d rows", L, dim,
                            n_train);
    model_head *h = calloc(1, sizeof *h);
    if (!h)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    h->b = b;
    h->L = L;
    h->dim = dim;
    h->batch = batch;
    h->u_mean = malloc((size_t)L * sizeof(double));
    h->u_std = malloc((size_t)L * sizeof(double));
    h->f_mean = calloc((size_t)L, sizeof(double));
    h->f_std = calloc((size_t)L, sizeof(double));
    h->zh = malloc((size_t)L * sizeof(float));
    float *f = malloc((size_t)L * sizeof(float)), *maps = malloc((size_t)4 * L * sizeof(float));
    int rc = GT_OK;
    if (!h->u_mean || !h->u_std || !h->f_mean || !h->f_std || !h->zh || !f || !maps) {
        rc = gt_error_set(err, GT_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(h->u_mean, u_mean, (size_t)(L - 1) * sizeof(double));
    memcpy(h->u_std, u_std, (size_t)(L - 1) * sizeof(double));
    /* fraction statistics over the training rows (double sums) */
    for (int i = 0; i < n_train; i++) {
        fractions(h, x_train + (size_t)i * dim, f, h->zh);
        for (int l = 0; l < L; l++) {
            h->f_mean[l] += f[l];
            h->f_std[l] += (double)f[l] * f[l];
        }
    }
    for (int l = 0; l < L; l++) {
        double m = h->f_mean[l] / n_train, v = h->f_std[l] / n_train - m * m;
        h->f_mean[l] = m;
        h->f_std[l] = v > MODEL_HEAD_STD_FLOOR * MODEL_HEAD_STD_FLOOR ? sqrt(v)
                                                                      : MODEL_HEAD_STD_FLOOR;
    }
    /* z = std_u x + mean_u, then h = f / std_f - mean_f / std_f */
    for (int l = 0; l < L; l++) {
        maps[l] = l < L - 1 ? (float)h->u_std[l] : 1.0f;
        maps[L + l] = l < L - 1 ? (float)h->u_mean[l] : 0.0f;
        maps[2 * L + l] = (float)(1.0 / h->f_std[l]);
        maps[3 * L + l] = (float)(-h->f_mean[l] / h->f_std[l]);
    }
    if ((rc = upload(h, &h->u_scale, maps, L, err)) ||
        (rc = upload(h, &h->u_shift, maps + L, L, err)) ||
        (rc = upload(h, &h->f_scale, maps + 2 * L, L, err)) ||
        (rc = upload(h, &h->f_shift, maps + 3 * L, L, err)) ||
        (rc = nn_alloc(b, (size_t)batch * (L - 1) * sizeof(float), (void **)&h->z, err)) ||
        (rc = nn_alloc(b, (size_t)batch * L * sizeof(float), (void **)&h->f, err)))
        goto out;
out:
    free(f);
    free(maps);
    if (rc)
        model_head_destroy(h);
    else
        *out = h;
    return rc;
}

static int check_rows(const model_head *h, int rows, gt_error *err)
{
    if (rows < 0 || rows > h->batch)
        return gt_error_set(err, GT_EINVAL, "model_head: %d rows, planned for %d", rows,
                            h->batch);
    return GT_OK;
}

int model_head_forward(model_head *h, nn_tensor x, nn_tensor out, gt_error *err)
{
    const int L = h->L, D = h->dim, B = x.rows;
    GT_TRY(check_rows(h, B, err));
    if (x.cols != D || out.cols != D + 1 || out.rows != B)
        return gt_error_set(err, GT_EINVAL, "model_head: x [%d, %d] -> out [%d, %d], want "
                            "widths %d -> %d", x.rows, x.cols, out.rows, out.cols, D, D + 1);
    nn_tensor z = nn_f32(h->z, B, L - 1), f = nn_f32(h->f, B, L);
    nn_tensor parts[2] = {f, nn_tensor_cols(x, L - 1, D - (L - 1))};
    GT_TRY(nn_affine_cols(h->b, z, nn_tensor_cols(x, 0, L - 1), h->u_scale, h->u_shift, err));
    GT_TRY(nn_sb_fwd(h->b, f, z, err));
    GT_TRY(nn_affine_cols(h->b, f, f, h->f_scale, h->f_shift, err));
    return nn_concat(h->b, out, parts, 2, err);
}

int model_head_backward(model_head *h, nn_tensor dout, nn_tensor dx, gt_error *err)
{
    const int L = h->L, D = h->dim, B = dx.rows;
    GT_TRY(check_rows(h, B, err));
    if (dx.cols != D || dout.cols != D + 1 || dout.rows != B)
        return gt_error_set(err, GT_EINVAL, "model_head: dout [%d, %d] -> dx [%d, %d]",
                            dout.rows, dout.cols, dx.rows, dx.cols);
    nn_tensor dz = nn_tensor_cols(dx, 0, L - 1), df = nn_tensor_cols(dout, 0, L);
    /* voxel columns pass through; the fraction columns go back through the
     * standardisation, the product and the de-standardisation */
    nn_tensor vparts[2] = {nn_f32(NULL, B, L), nn_tensor_cols(dx, L - 1, D - (L - 1))};
    GT_TRY(nn_split(h->b, vparts, 2, dout, 0, err));
    GT_TRY(nn_affine_cols(h->b, df, df, h->f_scale, NULL, err));
    GT_TRY(nn_sb_bwd(h->b, dz, df, nn_f32(h->z, B, L - 1), 0, err));
    return nn_affine_cols(h->b, dz, dz, h->u_scale, NULL, err);
}
