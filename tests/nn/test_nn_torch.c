/* The expert trunk against PyTorch on the same weights and inputs.
 *
 * tests/nn/torch_ref.py (run here with /usr/bin/python3; the test is
 * skipped when torch is unavailable) writes a fixture of weights, inputs,
 * outputs and gradients of L = sum(r * out) in fp32 and under CPU bf16
 * autocast.  Comparison is per tensor, normwise: max|ours - torch| <=
 * tol * max|torch|, with
 *   fp32: tol 1e-5 (summation order only; measured 4.4e-7);
 *   bf16: tol 4e-2 for outputs and gradients (measured 2.6e-2).  They differ
 *         by design: PyTorch's autocast rounds every linear layer's output
 *         to bf16, the engine keeps matmul outputs in fp32 and rounds only
 *         matmul inputs, so they agree to a few bf16 ulps (2^-8 = 0.4%)
 *         compounded over the layers, not bit for bit.  Both are also
 *         checked to be within 4e-2 of the fp32 reference. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cpu_backend.h"
#include "check.h"
#include "nn_trunk.h"

enum { IN = 37, NC = 2, EMB = 8, HID = 16, BLK = 2, OUT = 11, ROWS = 9 };
#define EMB_SCALE 10.0f

typedef struct rec {
    char name[64];
    int rows, cols;
    float *data;
} rec;

static rec recs[256];
static int nrecs;

static const rec *find(const char *name)
{
    for (int i = 0; i < nrecs; i++)
        if (!strcmp(recs[i].name, name))
            return &recs[i];
    fprintf(stderr, "fixture lacks %s\n", name);
    exit(1);
}

static int load_fixture(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    uint32_t nl;
    while (nrecs < 256 && fread(&nl, 4, 1, f) == 1) {
        rec *r = &recs[nrecs];
        uint32_t rc[2];
        if (nl >= sizeof r->name || fread(r->name, 1, nl, f) != nl || fread(rc, 4, 2, f) != 2)
            break;
        r->name[nl] = '\0';
        r->rows = (int)rc[0];
        r->cols = (int)rc[1];
        size_t n = (size_t)rc[0] * rc[1];
        r->data = malloc(n * sizeof(float) + 4);
        if (fread(r->data, 4, n, f) != n)
            break;
        nrecs++;
    }
    fclose(f);
    return nrecs > 0 ? 0 : -1;
}

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static double rel_err(const float *a, const float *ref, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - ref[i]));
    double s = max_abs(ref, n);
    return d / (s > 0 ? s : 1);
}

static double worst[2];

static void compare(const char *what, const float *ours, const rec *ref, double tol, int prec)
{
    size_t n = (size_t)ref->rows * ref->cols;
    double e = rel_err(ours, ref->data, n);
    worst[prec] = fmax(worst[prec], e);
    CHECK_MSG(e <= tol, "%s (%s): normwise error %.3g > %.3g", what, prec ? "bf16" : "fp32", e,
              tol);
}

static void run(nn_backend *b, nn_dtype prec)
{
    gt_error err;
    nn_trunk_config c;
    nn_trunk_config_default(&c);
    c.in_dim = IN;
    c.cond_dim = NC;
    c.emb_dim = EMB;
    c.emb_scale = EMB_SCALE;
    c.emb_max_period = 10000.0f;
    c.hidden = HID;
    c.blocks = BLK;
    c.out_dim = OUT;
    c.precision = prec;
    nn_trunk *t;
    if (nn_trunk_create(b, &c, &t, &err) || nn_trunk_plan(t, ROWS, &err)) {
        CHECK_MSG(0, "create: %s", err.message);
        return;
    }
    nn_params *p = nn_trunk_params(t);
    for (int v = 0; v < p->n_views; v++) {
        char nm[96];
        snprintf(nm, sizeof nm, "param:%s", p->views[v].name);
        const rec *r = find(nm);
        CHECK_EQ_INT(r->rows * r->cols, p->views[v].rows * p->views[v].cols);
        memcpy(p->value + p->views[v].offset, r->data,
               (size_t)r->rows * r->cols * sizeof(float));
    }
    CHECK_EQ_INT(nn_params_sync_bf16(p, &err), GT_OK);
    const char *tag = prec == NN_BF16 ? "16" : "32";
    double tol = prec == NN_BF16 ? 4e-2 : 1e-5;
    float *out = calloc(ROWS * OUT, 4), *dx = calloc(ROWS * IN, 4);
    const rec *x = find("x"), *cond = find("cond"), *r = find("r");
    CHECK_EQ_INT(nn_trunk_forward(t, nn_f32(x->data, ROWS, IN), nn_f32(cond->data, ROWS, NC),
                                  nn_f32(out, ROWS, OUT), 1, &err), GT_OK);
    char nm[96];
    snprintf(nm, sizeof nm, "out%s", tag);
    compare("output", out, find(nm), tol, prec);
    if (prec == NN_BF16)
        compare("output vs fp32 reference", out, find("out32"), tol, prec);
    CHECK_EQ_INT(nn_params_zero_grad(p, &err), GT_OK);
    CHECK_EQ_INT(nn_trunk_backward(t, nn_f32(r->data, ROWS, OUT), nn_f32(dx, ROWS, IN), &err),
                 GT_OK);
    snprintf(nm, sizeof nm, "dx%s", tag);
    compare("d_x", dx, find(nm), tol, prec);
    for (int v = 0; v < p->n_views; v++) {
        snprintf(nm, sizeof nm, "grad%s:%s", tag, p->views[v].name);
        compare(nm, p->grad + p->views[v].offset, find(nm), tol, prec);
    }
    free(out);
    free(dx);
    nn_trunk_destroy(t);
}

int main(void)
{
    const char *src = getenv("GIANT_SOURCE_DIR");
    if (!src)
        src = "../..";
    char cmd[4096];
    /* PyTorch is the reference, not the code under test: it runs at its
     * own best, never held to the ISA a test pass imposes on the engine
     * (its CPU bf16 autocast has no AVX2 kernels) */
    snprintf(cmd, sizeof cmd, "env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA /usr/bin/python3 "
             "%s/tests/nn/torch_ref.py torch_fixture.bin %d %d %d %g %d %d %d %d",
             src, IN, NC, EMB, (double)EMB_SCALE, HID, BLK, OUT, ROWS);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 77 || WEXITSTATUS(st) == 127)
        check_skip("PyTorch (/usr/bin/python3 with torch) is not available");
    if (WEXITSTATUS(st) != 0) {
        fprintf(stderr, "torch_ref.py failed with status %d\n", WEXITSTATUS(st));
        return 1;
    }
    if (load_fixture("torch_fixture.bin")) {
        fprintf(stderr, "cannot read torch_fixture.bin\n");
        return 1;
    }
    nn_backend *b;
    gt_error err;
    if (cpu_backend_create(&b, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    run(b, NN_F32);
    run(b, NN_BF16);
    printf("worst normwise error vs PyTorch: fp32 %.3g, bf16 %.3g\n", worst[0], worst[1]);
    nn_backend_close(b);
    for (int i = 0; i < nrecs; i++)
        free(recs[i].data);
    return check_finish();
}
