/* nn_rand_rows on the CPU backend: row r of a view is, bit for bit, the
 * rand_fill of that row alone at offset (row0 + r) * per_row, for normals
 * and uniforms, dense and strided views (ld > cols, the columns past the
 * view untouched), per_row at and above the minimum, a row0 near 2^40 (the
 * offset arithmetic is 64-bit), and a view that starts mid-row.  The
 * sampler's noise relies on it: its bytes were pinned with one fill per
 * row.  Then the refusals: too few blocks per row, a bad distribution,
 * non-finite parameters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_backend.h"
#include "nn_backend.h"
#include "nn_rng.h"
#include "nn_fixture.h"

static nn_backend *B;
static gt_error E;

/* Fills with rand_rows and, row by row, with rand_fill; both buffers start
 * with the same distinct values so a write past the view shows. */
static void check_rows(int rows, int cols, int ld, int col0, nn_dist dist, uint64_t row0,
                       uint64_t extra_blocks)
{
    const size_t n = (size_t)rows * ld;
    float *a = NULL, *b = NULL;
    OK(nn_alloc(B, n * sizeof(float), (void **)&a, &E));
    OK(nn_alloc(B, n * sizeof(float), (void **)&b, &E));
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] = -1000.0f - (float)i;
    const uint64_t seed = 0x5eedULL + (uint64_t)cols, stream = 101;
    const uint64_t per_row = nn_rng_blocks((uint64_t)cols) + extra_blocks;
    const float pa = dist == NN_DIST_NORMAL ? 0.25f : -2.0f, pb = 3.0f;
    nn_tensor v = nn_tensor_make(a + col0, NN_F32, rows, cols);
    v.ld = ld;
    OK(nn_rand_rows(B, v, dist, pa, pb, seed, stream, row0, per_row, &E));
    for (int r = 0; r < rows; r++)
        OK(nn_rand_fill(B, b + (size_t)r * ld + col0, (size_t)cols, dist, pa, pb, seed, stream,
                        (row0 + (uint64_t)r) * per_row, &E));
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    CHECK_MSG(diff == 0,
              "%s %dx%d (ld %d, from column %d, row0 %llu, per_row %llu): %zu of %zu floats "
              "differ from one rand_fill per row",
              dist == NN_DIST_NORMAL ? "normal" : "uniform", rows, cols, ld, col0,
              (unsigned long long)row0, (unsigned long long)per_row, diff, n);
    nn_free(B, a);
    nn_free(B, b);
}

static void test_refusals(void)
{
    float *x = NULL;
    OK(nn_alloc(B, 64 * sizeof(float), (void **)&x, &E));
    nn_tensor v = nn_f32(x, 4, 9);   /* 9 columns: 3 blocks per row */
    CHECK_EQ_INT(nn_rand_rows(B, v, NN_DIST_NORMAL, 0, 1, 1, 2, 0, 2, &E), GT_EINVAL);
    CHECK(strstr(E.message, "blocks per row") != NULL);
    CHECK_EQ_INT(nn_rand_rows(B, v, (nn_dist)7, 0, 1, 1, 2, 0, 3, &E), GT_EINVAL);
    CHECK_EQ_INT(nn_rand_rows(B, v, NN_DIST_NORMAL, NAN, 1, 1, 2, 0, 3, &E), GT_EINVAL);
    nn_tensor bad = v;
    bad.ld = 8;
    CHECK_EQ_INT(nn_rand_rows(B, bad, NN_DIST_NORMAL, 0, 1, 1, 2, 0, 3, &E), GT_EINVAL);
    CHECK_EQ_INT(nn_rand_rows(NULL, v, NN_DIST_NORMAL, 0, 1, 1, 2, 0, 3, &E), GT_EINVAL);
    /* nothing to fill: fine, even from a NULL pointer */
    OK(nn_rand_rows(B, nn_f32(NULL, 0, 9), NN_DIST_NORMAL, 0, 1, 1, 2, 0, 3, &E));
    nn_free(B, x);
}

int main(void)
{
    int rc = cpu_backend_create(&B, &E);
    CHECK_MSG(rc == GT_OK, "cpu backend: %s", E.message);
    if (rc)
        return check_finish();
    static const struct {
        int rows, cols, pad, col0;
    } shapes[] = {{1, 1, 0, 0}, {7, 5, 3, 0}, {33, 130, 1, 0}, {64, 128, 4, 0},
                  {5, 6480, 0, 0}, {9, 11, 6, 2}, {3, 4000, 100, 0}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int ld = shapes[k].col0 + shapes[k].cols + shapes[k].pad;
        for (int dist = 0; dist < 2; dist++) {
            check_rows(shapes[k].rows, shapes[k].cols, ld, shapes[k].col0, (nn_dist)dist, 0, 0);
            check_rows(shapes[k].rows, shapes[k].cols, ld, shapes[k].col0, (nn_dist)dist, 17, 5);
            check_rows(shapes[k].rows, shapes[k].cols, ld, shapes[k].col0, (nn_dist)dist,
                       (1ULL << 40) + 3, 0);
        }
    }
    test_refusals();
    printf("rand_rows: %zu shapes x 2 distributions x 3 offsets equal one rand_fill per row\n",
           sizeof shapes / sizeof shapes[0]);
    nn_backend_close(B);
    return check_finish();
}
