/* loader: seeded split and shuffles, epochs, batches and gathers. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loader.h"

static void test_split(void)
{
    int64_t *t, *v, nt, nv;
    gt_error err = {0};
    const int64_t n = 1003;
    CHECK_EQ_INT(loader_split(n, 0.2, 5, &t, &nt, &v, &nv, &err), GT_OK);
    CHECK_EQ_INT(nv, 201);
    CHECK_EQ_INT(nt + nv, n);
    /* disjoint, complete, sorted */
    char *seen = calloc(n, 1);
    int dup = 0, unsorted = 0;
    for (int64_t i = 0; i < nt; i++) {
        dup += seen[t[i]]++;
        if (i && t[i] <= t[i - 1])
            unsorted++;
    }
    for (int64_t i = 0; i < nv; i++) {
        dup += seen[v[i]]++;
        if (i && v[i] <= v[i - 1])
            unsorted++;
    }
    int missing = 0;
    for (int64_t i = 0; i < n; i++)
        missing += !seen[i];
    CHECK_EQ_INT(dup, 0);
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_INT(unsorted, 0);
    /* same seed, same split; another seed, another split */
    int64_t *t2, *v2, nt2, nv2;
    CHECK_EQ_INT(loader_split(n, 0.2, 5, &t2, &nt2, &v2, &nv2, &err), GT_OK);
    CHECK(nv2 == nv && !memcmp(v, v2, nv * sizeof *v));
    free(t2);
    free(v2);
    CHECK_EQ_INT(loader_split(n, 0.2, 6, &t2, &nt2, &v2, &nv2, &err), GT_OK);
    CHECK(nv2 == nv && memcmp(v, v2, nv * sizeof *v) != 0);
    /* the validation rows are spread over the file, not a block */
    CHECK(v[0] < n / 10 && v[nv - 1] > n - n / 10);
    free(t2);
    free(v2);
    free(seen);
    free(t);
    free(v);
    /* edges and bad arguments */
    CHECK_EQ_INT(loader_split(10, 0.0, 1, &t, &nt, &v, &nv, &err), GT_OK);
    CHECK(nt == 10 && nv == 0);
    free(t);
    free(v);
    CHECK_EQ_INT(loader_split(10, 0.01, 1, &t, &nt, &v, &nv, &err), GT_OK);
    CHECK(nt == 9 && nv == 1);
    free(t);
    free(v);
    CHECK_EQ_INT(loader_split(0, 0.1, 1, &t, &nt, &v, &nv, &err), GT_EINVAL);
    CHECK_EQ_INT(loader_split(10, 1.0, 1, &t, &nt, &v, &nv, &err), GT_EINVAL);
    CHECK_EQ_INT(loader_split(10, -0.1, 1, &t, &nt, &v, &nv, &err), GT_EINVAL);
}

static void test_batches(void)
{
    const int64_t n = 103, batch = 10;
    int64_t rows[103];
    for (int i = 0; i < n; i++)
        rows[i] = 1000 + i; /* the pool holds arbitrary row ids */
    loader a, b;
    gt_error err = {0};
    CHECK_EQ_INT(loader_init(&a, rows, n, batch, 11, 1, 0, &err), GT_OK);
    CHECK_EQ_INT(loader_init(&b, rows, n, batch, 11, 1, 0, &err), GT_OK);
    int64_t epoch0[103], epoch1[103];
    for (int ep = 0; ep < 2; ep++) {
        int64_t got = 0, k;
        const int64_t *ia, *ib;
        int batches = 0;
        while ((k = loader_next(&a, &ia)) > 0) {
            CHECK_EQ_INT(loader_next(&b, &ib), k);
            CHECK(!memcmp(ia, ib, k * sizeof *ia)); /* deterministic */
            memcpy((ep ? epoch1 : epoch0) + got, ia, k * sizeof *ia);
            got += k;
            batches++;
        }
        CHECK_EQ_INT(loader_next(&b, &ib), 0);
        CHECK_EQ_INT(got, n);
        CHECK_EQ_INT(batches, 11); /* 10 full + 1 of 3 */
    }
    /* each epoch is a permutation of the pool, and epochs differ */
    char seen[103] = {0};
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int64_t r = epoch1[i] - 1000;
        if (r < 0 || r >= n || seen[r]++)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(memcmp(epoch0, epoch1, sizeof epoch0) != 0);
    CHECK(memcmp(epoch0, rows, sizeof epoch0) != 0);
    loader_free(&a);
    loader_free(&b);

    /* no shuffle (validation): pool order; drop_last skips the tail */
    loader c;
    CHECK_EQ_INT(loader_init(&c, rows, n, batch, 1, 0, 1, &err), GT_OK);
    const int64_t *ic;
    int64_t k, got = 0;
    while ((k = loader_next(&c, &ic)) > 0) {
        CHECK_EQ_INT(k, batch);
        CHECK_EQ_INT(ic[0], 1000 + got);
        got += k;
    }
    CHECK_EQ_INT(got, 100);
    loader_free(&c);

    /* gather: one copy into the caller's buffer */
    const int dim = 3;
    float src[5 * 3], dst[2 * 3];
    for (int i = 0; i < 15; i++)
        src[i] = (float)i;
    int64_t idx[2] = {4, 1};
    loader_gather(src, dim, idx, 2, dst);
    CHECK(dst[0] == 12 && dst[2] == 14 && dst[3] == 3 && dst[5] == 5);
    int64_t run[3] = {7, 8, 9}, gap[3] = {7, 9, 10};
    CHECK(loader_is_contiguous(run, 3));
    CHECK(!loader_is_contiguous(gap, 3));
    CHECK(!loader_is_contiguous(run, 0));

    CHECK_EQ_INT(loader_init(&c, rows, n, 0, 1, 1, 0, &err), GT_EINVAL);
    CHECK_EQ_INT(loader_init(&c, rows, 0, 4, 1, 1, 0, &err), GT_EINVAL);
    CHECK_EQ_INT(loader_init(&c, rows, 5, 8, 1, 1, 1, &err), GT_EINVAL);
    CHECK_EQ_INT(loader_init(&c, NULL, 5, 2, 1, 1, 0, &err), GT_EINVAL);
}

int main(void)
{
    test_split();
    test_batches();
    return check_finish();
}
