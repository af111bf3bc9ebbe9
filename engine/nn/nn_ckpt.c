/* nn_ckpt.c: checkpoint serialisation (see nn_ckpt.h for the layout). */
#include "nn_ckpt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* CRC-32 (IEEE 802.3, reflected, the one zlib's crc32() computes), by a
 * 256-entry table built on first use: no library needed. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t ckpt_crc32(const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

uint32_t nn_ckpt_crc32(const void *data, size_t n)
{
    return ckpt_crc32(data, n);
}

static const char CKPT_MAGIC[8] = {'G', 'I', 'A', 'N', 'T', 'N', 'N', '\0'};

#define CKPT_HAS_OPT 1u
#define CKPT_HAS_RNG 2u

/* A cursor over a byte buffer; little-endian host assumed (x86-64, arm64:
 * every platform the engine builds for). */
typedef struct cur {
    unsigned char *p;
    const unsigned char *rp;
    size_t pos, len;
} cur;

static void put(cur *c, const void *src, size_t n)
{
    memcpy(c->p + c->pos, src, n);
    c->pos += n;
}

static int get(cur *c, void *dst, size_t n)
{
    if (c->len - c->pos < n)
        return -1;
    memcpy(dst, c->rp + c->pos, n);
    c->pos += n;
    return 0;
}

static size_t table_bytes(const nn_params *p)
{
    size_t n = 0;
    for (int i = 0; i < p->n_views; i++)
        n += 2 + strlen(p->views[i].name) + 8;
    return n;
}

static size_t header_bytes(const nn_params *p)
{
    return 8 + 4 + 4 + 4 + 8 + table_bytes(p) + 3 * 8 + 8;
}

/* Copies every view of a backend buffer (values, m or v) into the cursor. */
static int put_views(cur *c, const nn_params *p, const float *buf, gt_error *err)
{
    for (int i = 0; i < p->n_views; i++) {
        size_t n = (size_t)p->views[i].rows * p->views[i].cols * sizeof(float);
        int rc = nn_copy_d2h(p->b, c->p + c->pos, buf + p->views[i].offset, n, err);
        if (rc)
            return rc;
        c->pos += n;
    }
    return GT_OK;
}

int nn_ckpt_save(const nn_params *p, const nn_adamw_opt *opt, const nn_rng *rng, void **buf,
                 size_t *len, gt_error *err)
{
    if (!p || !p->value || !buf || !len)
        return gt_error_set(err, GT_EINVAL, "checkpoint save: NULL or unallocated argument");
    *buf = NULL;
    *len = 0;
    size_t numel = nn_params_numel(p);
    size_t total = header_bytes(p) + numel * sizeof(float) * (opt ? 3 : 1) + 4;
    cur c = {0};
    c.p = malloc(total);
    if (!c.p)
        return gt_error_set(err, GT_ENOMEM, "checkpoint save: cannot allocate %zu bytes",
                            total);
    uint32_t version = NN_CKPT_VERSION, flags = (opt ? CKPT_HAS_OPT : 0) | (rng ? CKPT_HAS_RNG : 0);
    uint32_t nv = (uint32_t)p->n_views;
    uint64_t ne = numel;
    put(&c, CKPT_MAGIC, 8);
    put(&c, &version, 4);
    put(&c, &flags, 4);
    put(&c, &nv, 4);
    put(&c, &ne, 8);
    for (int i = 0; i < p->n_views; i++) {
        uint16_t nl = (uint16_t)strlen(p->views[i].name);
        uint32_t r = (uint32_t)p->views[i].rows, co = (uint32_t)p->views[i].cols;
        put(&c, &nl, 2);
        put(&c, p->views[i].name, nl);
        put(&c, &r, 4);
        put(&c, &co, 4);
    }
    uint64_t rs[3] = {0, 0, 0};
    if (rng) {
        rs[0] = rng->seed;
        rs[1] = rng->stream;
        rs[2] = rng->offset;
    }
    int64_t step = opt ? opt->step : 0;
    put(&c, rs, sizeof rs);
    put(&c, &step, 8);
    int rc;
    if ((rc = put_views(&c, p, p->value, err)) ||
        (opt && ((rc = put_views(&c, p, opt->m, err)) || (rc = put_views(&c, p, opt->v, err))))) {
        free(c.p);
        return gt_error_wrap(err, "checkpoint save");
    }
    uint32_t crc = ckpt_crc32(c.p, c.pos);
    put(&c, &crc, 4);
    *buf = c.p;
    *len = c.pos;
    return GT_OK;
}

int nn_ckpt_load(nn_params *p, nn_adamw_opt *opt, nn_rng *rng, const void *buf, size_t len,
                 gt_error *err)
{
    if (!p || !p->value || (!buf && len))
        return gt_error_set(err, GT_EINVAL, "checkpoint load: NULL or unallocated argument");
    cur c = {0};
    c.rp = buf;
    c.len = len;
    char magic[8];
    uint32_t version, flags, nv;
    uint64_t ne;
    if (get(&c, magic, 8) || memcmp(magic, CKPT_MAGIC, 8))
        return gt_error_set(err, GT_EFORMAT, "checkpoint load: not a checkpoint (bad magic, "
                                             "%zu bytes)", len);
    if (get(&c, &version, 4) || get(&c, &flags, 4) || get(&c, &nv, 4) || get(&c, &ne, 8))
        return gt_error_set(err, GT_EFORMAT, "checkpoint load: truncated header (%zu bytes)",
                            len);
    if (version != NN_CKPT_VERSION)
        return gt_error_set(err, GT_EFORMAT,
                            "checkpoint load: version %u, this engine reads version %u", version,
                            NN_CKPT_VERSION);
    if (len < 4)
        return gt_error_set(err, GT_EFORMAT, "checkpoint load: truncated");
    /* The checksum guards everything; check it before trusting any size. */
    uint32_t stored;
    memcpy(&stored, (const unsigned char *)buf + len - 4, 4);
    uint32_t crc = ckpt_crc32(buf, len - 4);
    if (crc != stored)
        return gt_error_set(err, GT_ECHECKSUM,
                            "checkpoint load: checksum mismatch (stored %08x, computed %08x): "
                            "the buffer is truncated or corrupted",
                            stored, crc);
    if ((int)nv != p->n_views)
        return gt_error_set(err, GT_EFORMAT,
                            "checkpoint load: checkpoint has %u tensors, the model has %d", nv,
                            p->n_views);
    for (int i = 0; i < p->n_views; i++) {
        uint16_t nl;
        char name[NN_PARAM_NAME_MAX + 1];
        uint32_t r, co;
        if (get(&c, &nl, 2) || nl > NN_PARAM_NAME_MAX || get(&c, name, nl))
            return gt_error_set(err, GT_EFORMAT, "checkpoint load: bad tensor table entry %d",
                                i);
        name[nl] = '\0';
        if (get(&c, &r, 4) || get(&c, &co, 4))
            return gt_error_set(err, GT_EFORMAT, "checkpoint load: truncated tensor table");
        const nn_param_view *v = &p->views[i];
        if (strcmp(name, v->name))
            return gt_error_set(err, GT_EFORMAT,
                                "checkpoint load: tensor %d is '%s' in the checkpoint but '%s' "
                                "in the model",
                                i, name, v->name);
        if ((int)r != v->rows || (int)co != v->cols)
            return gt_error_set(err, GT_EFORMAT,
                                "checkpoint load: tensor '%s' has shape %ux%u in the checkpoint "
                                "but %dx%d in the model",
                                name, r, co, v->rows, v->cols);
    }
    uint64_t rs[3];
    int64_t step;
    if (get(&c, rs, sizeof rs) || get(&c, &step, 8))
        return gt_error_set(err, GT_EFORMAT, "checkpoint load: truncated state");
    size_t numel = nn_params_numel(p);
    if (ne != numel)
        return gt_error_set(err, GT_EFORMAT, "checkpoint load: %llu parameters, model has %zu",
                            (unsigned long long)ne, numel);
    int has_opt = (flags & CKPT_HAS_OPT) != 0;
    size_t need = c.pos + numel * sizeof(float) * (has_opt ? 3 : 1) + 4;
    if (need != len)
        return gt_error_set(err, GT_EFORMAT, "checkpoint load: %zu bytes, expected %zu", len,
                            need);
    if (opt && !has_opt)
        return gt_error_set(err, GT_EFORMAT,
                            "checkpoint load: optimizer state requested but not stored");
    if (rng && !(flags & CKPT_HAS_RNG))
        return gt_error_set(err, GT_EFORMAT,
                            "checkpoint load: generator state requested but not stored");
    if (opt && opt->p != p)
        return gt_error_set(err, GT_EINVAL, "checkpoint load: optimizer of another model");
    /* Everything validated: copy in. */
    int nbuf = has_opt ? 3 : 1;
    for (int k = 0; k < nbuf; k++) {
        float *dst = k == 0 ? p->value : k == 1 ? (opt ? opt->m : NULL) : (opt ? opt->v : NULL);
        for (int i = 0; i < p->n_views; i++) {
            size_t n = (size_t)p->views[i].rows * p->views[i].cols * sizeof(float);
            if (dst) {
                int rc = nn_copy_h2d(p->b, dst + p->views[i].offset, c.rp + c.pos, n, err);
                if (rc)
                    return gt_error_wrap(err, "checkpoint load");
            }
            c.pos += n;
        }
    }
    if (opt)
        opt->step = step;
    if (rng) {
        rng->seed = rs[0];
        rng->stream = rs[1];
        rng->offset = rs[2];
    }
    int rc = nn_params_sync_bf16(p, err);
    return rc ? gt_error_wrap(err, "checkpoint load") : GT_OK;
}
