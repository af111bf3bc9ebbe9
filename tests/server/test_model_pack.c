/* The model file (model_pack) and the models table (models), in-process on
 * in-memory databases: a tiny run trained with sched_train_run is exported
 * (twice: the same bytes), read back with every part where the manifest
 * says, and imported into a second database (201-like, then the same model
 * again by its content hash, whatever name is asked; a taken name for
 * other content refused).  Every kind of bad file is refused with its
 * fault and the part it concerns: one byte changed in each part, the file
 * cut at the header, inside each part and in the trailer, bytes after the
 * trailer, a newer format version (in the header and in the manifest), and
 * a geometry.xml that is not the geometry the config names.  Finally the
 * sampling worker serves the imported model with the very bytes the run
 * gives for the same jobs.  A run with an acceptance test (model.accept)
 * exports format 2, its test as accept.bin: read back, each part damaged or
 * cut, a test of other checkpoints or of another geometry's features
 * refused, and the imported file serves the run's showers, test and all. */
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "gt_le.h"
#include "model_accept.h"
#include "model_config.h"
#include "model_data.h"
#include "model_pack.h"
#include "models.h"
#include "runs.h"
#include "sampling.h"
#include "scheduler.h"
#include "store.h"
#include "run_fixture.h"

static store *open_memory(void)
{
    store_migration list[STORE_MAX_MIGRATIONS];
    int n = 0;
    store *db = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(store_builtin_migrations(list, &n, &err), GT_OK);
    CHECK_EQ_INT(store_open(&db, ":memory:", &err), GT_OK);
    CHECK_EQ_INT(store_migrate(db, list, n, NULL, &err), GT_OK);
    return db;
}

/* A tiny run trained to the end; with accept, a small acceptance test too. */
static int64_t train(store *db, const char *name, int steps, int accept)
{
    int64_t id = run_fixture_record(db, name, steps, accept);
    gt_error err = {0};
    CHECK_MSG(sched_train_run(db, id, ".", "cpu", MODEL_BF16_NATIVE, NULL, &err) == GT_OK,
              "training: %s", err.message);
    return id;
}

/* Where each part's data lies in a file: offsets and sizes, in file order. */
typedef struct span {
    char name[64];
    size_t name_len; /* strlen(name) */
    size_t off, size;
} span;

/* The parts of a well-formed file (the writer's own output): at most
 * SPANS_MAX of them, a name cut to what span holds.  Returns how many. */
#define SPANS_MAX 8
static int spans_of(const uint8_t *b, size_t len, span *out)
{
    uint32_t n = gt_le_get_u32(b + 12);
    size_t off = 16;
    int got = 0;
    for (uint32_t i = 0; i < n && got < SPANS_MAX && off + 10 <= len; i++) {
        size_t nl = gt_le_get_u16(b + off);
        size_t keep = nl < sizeof out[got].name ? nl : sizeof out[got].name - 1;
        memcpy(out[got].name, b + off + 2, keep);
        out[got].name[keep] = '\0';
        out[got].name_len = keep;
        off += 2 + nl;
        out[got].size = (size_t)gt_le_get_u64(b + off);
        off += 8;
        out[got].off = off;
        off += out[got].size;
        got++;
    }
    return got;
}

/* Reads buf and expects fault f naming part (NULL: any). */
static void expect_fault(const void *buf, size_t len, model_pack_fault f, const char *part,
                         const char *what)
{
    model_pack p;
    model_pack_fault got = MODEL_PACK_FAULT_NONE;
    char at[64] = "";
    gt_error err = {0};
    int rc = model_pack_read(buf, len, &p, &got, at, &err);
    CHECK_MSG(rc != GT_OK, "%s: accepted", what);
    CHECK_MSG(got == f, "%s: fault %s, want %s (%s)", what, model_pack_fault_code(got),
              model_pack_fault_code(f), err.message);
    if (part)
        CHECK_MSG(strcmp(at, part) == 0, "%s: part '%s', want '%s' (%s)", what, at, part,
                  err.message);
    if (part && part[0])
        CHECK_MSG(strstr(err.message, part) != NULL, "%s: the message does not name %s: %s",
                  what, part, err.message);
}

/* The manifest of a file replaced by text (its trailer hash made right), so
 * only what the text says is wrong. */
static uint8_t *with_manifest(const uint8_t *b, size_t len, const char *text, size_t *out_len)
{
    span sp[SPANS_MAX];
    spans_of(b, len, sp);
    size_t tl = strlen(text);
    *out_len = len - sp[0].size + tl;
    uint8_t *o = malloc(*out_len);
    memcpy(o, b, sp[0].off);
    gt_le_put_u64(o + sp[0].off - 8, tl);
    memcpy(o + sp[0].off, text, tl);
    memcpy(o + sp[0].off + tl, b + sp[0].off + sp[0].size, len - sp[0].off - sp[0].size);
    unsigned int n = 0;
    EVP_Digest(text, tl, o + *out_len - 32, &n, EVP_sha256(), NULL);
    return o;
}

/* The file with part i's data (1: the first after the manifest) replaced,
 * and its manifest made right for it (size, sha256, content_sha256, the
 * trailer): a file whose hashes all agree, wrong only in what data is. */
static uint8_t *with_part(const uint8_t *b, size_t len, int i, const void *data, size_t size,
                          size_t *out_len)
{
    span sp[SPANS_MAX];
    int n = spans_of(b, len, sp);
    json_t *m = json_loadb((const char *)b + sp[0].off, sp[0].size, 0, NULL);
    json_t *parts = json_object_get(m, "parts");
    unsigned char md[8][32], sum[32];
    unsigned int w = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (int k = 1; k < n; k++) {
        const void *d = k == i ? data : b + sp[k].off;
        size_t dl = k == i ? size : sp[k].size;
        EVP_Digest(d, dl, md[k], &w, EVP_sha256(), NULL);
        char hex[65];
        for (int j = 0; j < 32; j++)
            snprintf(hex + 2 * j, 3, "%02x", md[k][j]);
        json_t *e = json_array_get(parts, (size_t)(k - 1));
        json_object_set_new(e, "sha256", json_string(hex));
        json_object_set_new(e, "size", json_integer((json_int_t)dl));
        EVP_DigestUpdate(ctx, sp[k].name, sp[k].name_len + 1);
        EVP_DigestUpdate(ctx, md[k], 32);
    }
    EVP_DigestFinal_ex(ctx, sum, &w);
    EVP_MD_CTX_free(ctx);
    char content[65];
    for (int j = 0; j < 32; j++)
        snprintf(content + 2 * j, 3, "%02x", sum[j]);
    json_object_set_new(m, "content_sha256", json_string(content));
    char *text = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(m);
    /* the parts laid out again: header, manifest, parts, trailer */
    size_t tl = strlen(text), total = 16 + 40;
    for (int k = 0; k < n; k++)
        total += 2 + sp[k].name_len + 8 + (k == 0 ? tl : k == i ? size : sp[k].size);
    uint8_t *o = malloc(total);
    memcpy(o, b, 16);
    size_t off = 16;
    for (int k = 0; k < n; k++) {
        const void *d = k == 0 ? text : k == i ? data : (const void *)(b + sp[k].off);
        size_t dl = k == 0 ? tl : k == i ? size : sp[k].size;
        size_t nl = sp[k].name_len;
        gt_le_put_u16(o + off, (uint16_t)nl);
        memcpy(o + off + 2, sp[k].name, nl);
        gt_le_put_u64(o + off + 2 + nl, dl);
        memcpy(o + off + 10 + nl, d, dl);
        off += 10 + nl + dl;
    }
    memcpy(o + off, "GIANTEND", 8);
    EVP_Digest(text, tl, o + off + 8, &w, EVP_sha256(), NULL);
    free(text);
    *out_len = total;
    return o;
}

/* The sampling worker's jobs, waited for. */
/* The config a model file gives back has the flags later migrations added
 * (sample.symmetrize, stage 2's count_stick, stage 1's profile) all on
 * (1) or all off (0). */
static void expect_era_flags(const void *file, size_t len, int on)
{
    model_pack op;
    model_config oc;
    gt_error err = {0};
    CHECK_EQ_INT(model_pack_read(file, len, &op, NULL, NULL, &err), GT_OK);
    CHECK_EQ_INT(model_pack_config(&op, &oc, NULL, 0, &err), GT_OK);
    CHECK_EQ_INT(oc.symmetrize, on);
    CHECK_EQ_INT(oc.stage2.count_stick, on);
    CHECK_EQ_INT(oc.stage1.profile, on);
    model_pack_free(&op);
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int finished;

static void on_done(sampling_job *job)
{
    (void)job;
    pthread_mutex_lock(&mu);
    finished++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void sample(store *db, int64_t run, int64_t model, sampling_job *j, float *e, int n)
{
    sampling *s = NULL;
    gt_error err = {0};
    CHECK_EQ_INT(sampling_start(&s, db, "cpu", 2, 0, &err), GT_OK);
    memset(j, 0, sizeof *j);
    j->run = run;
    j->model = model;
    j->n = n;
    j->e_inc = e;
    j->seed = 77;
    j->row0 = 3;
    j->done = on_done;
    pthread_mutex_lock(&mu);
    int target = finished + 1;
    pthread_mutex_unlock(&mu);
    if (run) {
        CHECK_EQ_INT(runs_best_pair(db, run, &j->version, &err), GT_OK);
    }
    CHECK_EQ_INT(sampling_submit(s, j, &err), GT_OK);
    pthread_mutex_lock(&mu);
    while (finished < target)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    sampling_stop(s);
    CHECK_MSG(j->rc == GT_OK, "sampling: %s", j->message);
}

int main(void)
{
    gt_error err = {0};
    store *db = open_memory();
    int64_t run = train(db, "exported", 10, 0);
    int64_t other = train(db, "other", 5, 0);
    if (check_failures_)
        return check_finish();

    /* export: the same bytes twice (no clock in the file) */
    void *file = NULL, *again = NULL;
    size_t len = 0, len2 = 0;
    CHECK_EQ_INT(models_export(db, run, &file, &len, &err), GT_OK);
    CHECK_EQ_INT(models_export(db, run, &again, &len2, &err), GT_OK);
    CHECK(len == len2 && memcmp(file, again, len) == 0);
    free(again);
    CHECK_EQ_INT(models_export(db, 999, &again, &len2, &err), GT_ENOTFOUND);
    const uint8_t *b = file;
    CHECK(memcmp(b, "GIANTPKG", 8) == 0 && gt_le_get_u32(b + 8) == 1);

    /* read back: each part where the manifest says, the checkpoints the run's */
    model_pack p;
    model_pack_fault fault;
    char part[64];
    CHECK_MSG(model_pack_read(file, len, &p, &fault, part, &err) == GT_OK, "%s", err.message);
    CHECK_EQ_INT(p.run_id, run);
    CHECK(strcmp(p.geometry, "dataset_1_photons") == 0);
    CHECK_EQ_INT(p.voxels, 368);
    void *ck = NULL;
    size_t ckl = 0;
    for (int s = 0; s < 2; s++) {
        CHECK_EQ_INT(runs_load_checkpoint(db, run, s + 1, 1, &ck, &ckl, NULL, &err), GT_OK);
        CHECK(ckl == p.ckpt_len[s] && memcmp(ck, p.ckpt[s], ckl) == 0);
        free(ck);
    }
    const void *xml;
    size_t xml_len;
    CHECK_EQ_INT(model_geometry_builtin_xml("dataset_1_photons", &xml, &xml_len, &err), GT_OK);
    CHECK(xml_len == p.geometry_len && memcmp(xml, p.geometry_xml, xml_len) == 0);
    json_t *m = p.manifest;
    CHECK_EQ_INT(json_integer_value(json_object_get(m, "format_version")), 1);
    CHECK(strcmp(json_string_value(json_object_get(m, "content_sha256")), p.content_sha256) == 0);
    CHECK_EQ_INT(json_array_size(json_object_get(m, "parts")), 5);
    char content[65];
    snprintf(content, sizeof content, "%s", p.content_sha256);
    model_pack_free(&p);

    /* every part's data: one byte changed is that part's fault */
    span sp[SPANS_MAX];
    int np = spans_of(b, len, sp);
    CHECK_EQ_INT(np, 6);
    uint8_t *bad = malloc(len);
    for (int i = 0; i < np; i++) {
        memcpy(bad, file, len);
        bad[sp[i].off + sp[i].size / 2] ^= 0x01;
        char what[96];
        snprintf(what, sizeof what, "a byte of %.63s", sp[i].name);
        expect_fault(bad, len, MODEL_PACK_FAULT_CORRUPT, sp[i].name, what);
    }
    memcpy(bad, file, len);
    bad[len - 1] ^= 0x80;                  /* the trailer's hash of the manifest */
    expect_fault(bad, len, MODEL_PACK_FAULT_CORRUPT, "manifest.json", "the trailer's hash");
    memcpy(bad, file, len);
    bad[0] = 'X';
    expect_fault(bad, len, MODEL_PACK_FAULT_CORRUPT, "", "the magic");

    /* cut short anywhere: truncated (and never read past the end: ASan) */
    size_t cuts[] = {0, 1, 7, 8, 12, 16, 17, 20, len - 1, len - 20, len - 40};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "cut at %zu", cuts[i]);
        uint8_t *cut = malloc(cuts[i] ? cuts[i] : 1);
        memcpy(cut, file, cuts[i]);
        expect_fault(cut, cuts[i], MODEL_PACK_FAULT_TRUNCATED, NULL, what);
        free(cut);
    }
    for (int i = 0; i < np; i++) {
        char what[96];
        snprintf(what, sizeof what, "cut inside %.63s", sp[i].name);
        size_t at = sp[i].off + sp[i].size / 2;
        uint8_t *cut = malloc(at);
        memcpy(cut, file, at);
        expect_fault(cut, at, MODEL_PACK_FAULT_TRUNCATED, sp[i].name, what);
        free(cut);
    }
    uint8_t *longer = malloc(len + 3);
    memcpy(longer, file, len);
    memset(longer + len, 0, 3);
    expect_fault(longer, len + 3, MODEL_PACK_FAULT_CORRUPT, "", "bytes after the trailer");
    free(longer);

    /* a newer format: in the header, and in the manifest */
    memcpy(bad, file, len);
    gt_le_put_u32(bad + 8, MODEL_PACK_VERSION + 1);
    expect_fault(bad, len, MODEL_PACK_FAULT_VERSION, "", "a newer header version");
    /* format 2's header on a format-1 file: a part short */
    gt_le_put_u32(bad + 8, 2);
    expect_fault(bad, len, MODEL_PACK_FAULT_CORRUPT, "", "header version 2 with six parts");
    {
        char *mtext = malloc(sp[0].size + 1);
        memcpy(mtext, b + sp[0].off, sp[0].size);
        mtext[sp[0].size] = '\0';
        char *at = strstr(mtext, "\"format_version\":1");
        CHECK(at != NULL);
        if (at) {
            at[strlen("\"format_version\":")] = '0' + MODEL_PACK_VERSION + 1;
            size_t nl = 0;
            uint8_t *v2 = with_manifest(b, len, mtext, &nl);
            expect_fault(v2, nl, MODEL_PACK_FAULT_VERSION, "manifest.json", "a newer manifest");
            free(v2);
            at[strlen("\"format_version\":")] = '2';
            v2 = with_manifest(b, len, mtext, &nl);
            expect_fault(v2, nl, MODEL_PACK_FAULT_CORRUPT, "manifest.json",
                         "a manifest of format 2 in a file of format 1");
            free(v2);
        }
        free(mtext);
    }

    /* a geometry.xml other than the one the config names, hashes right */
    {
        void *ck1 = NULL, *ck2 = NULL, *mis = NULL;
        size_t l1 = 0, l2 = 0, ml = 0;
        char *config = NULL;
        const void *pions;
        size_t pl;
        CHECK_EQ_INT(runs_load_checkpoint(db, run, 1, 1, &ck1, &l1, NULL, &err), GT_OK);
        CHECK_EQ_INT(runs_load_checkpoint(db, run, 2, 1, &ck2, &l2, NULL, &err), GT_OK);
        CHECK_EQ_INT(runs_config(db, run, &config, &err), GT_OK);
        CHECK_EQ_INT(model_geometry_builtin_xml("dataset_1_pions", &pions, &pl, &err), GT_OK);
        model_pack_src src = {.run_id = run, .giant_version = "test", .config_json = config,
                              .geometry_xml = pions, .geometry_len = pl,
                              .ckpt = {ck1, ck2}, .ckpt_len = {l1, l2}};
        CHECK_EQ_INT(model_pack_write(&src, &mis, &ml, &err), GT_OK);
        expect_fault(mis, ml, MODEL_PACK_FAULT_GEOMETRY, "geometry.xml", "the pions geometry");
        free(mis);
        src.geometry_xml = xml;
        src.geometry_len = xml_len;
        /* a file written before sample.symmetrize (its config names every
         * other field) is read as a run of its day: off; this one is on */
        {
            json_t *cj = json_loads(config, 0, NULL);
            json_t *smp = json_object_get(cj, "sample");
            json_t *s2 = json_object_get(json_object_get(cj, "model"), "stage2");
            CHECK(json_is_true(json_object_get(smp, "symmetrize")));
            json_t *s1 = json_object_get(json_object_get(cj, "model"), "stage1");
            CHECK(json_is_true(json_object_get(s2, "count_stick")));
            CHECK(json_is_true(json_object_get(s1, "profile")));
            json_object_del(smp, "symmetrize");
            json_object_del(s2, "count_stick"); /* likewise, before 0013 */
            json_object_del(s1, "profile");     /* and before 0014 */
            json_object_del(cj, "config_version"); /* and before versions */
            char *old = json_dumps(cj, JSON_COMPACT);
            model_pack_src o = src;
            o.config_json = old;
            void *of = NULL;
            size_t ol = 0;
            CHECK_EQ_INT(model_pack_write(&o, &of, &ol, &err), GT_OK);
            expect_era_flags(of, ol, 0);
            expect_era_flags(file, len, 1);
            free(of);
            free(old);
            json_decref(cj);
        }
        /* stage checkpoints swapped: not a model */
        src.ckpt[0] = ck2;
        src.ckpt_len[0] = l2;
        CHECK(model_pack_write(&src, &mis, &ml, &err) != GT_OK);
        free(ck1);
        free(ck2);
        free(config);
    }
    CHECK(strcmp(model_pack_fault_code(MODEL_PACK_FAULT_TRUNCATED), "model_truncated") == 0);
    CHECK(strcmp(model_pack_fault_code(MODEL_PACK_FAULT_VERSION),
                 "model_version_unsupported") == 0);
    CHECK(strcmp(model_pack_fault_code(MODEL_PACK_FAULT_GEOMETRY), "geometry_mismatch") == 0);

    /* import into a second database: new, then the same model by content */
    store *db2 = open_memory();
    json_t *row = NULL;
    int created = -1, taken = -1;
    CHECK_MSG(models_import(db2, "tiny", file, len, &row, &created, &fault, part, &taken, &err) ==
                  GT_OK, "%s", err.message);
    CHECK_EQ_INT(created, 1);
    CHECK(strcmp(json_string_value(json_object_get(row, "content_sha256")), content) == 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(row, "source_run_id")), run);
    CHECK(json_is_object(json_object_get(row, "manifest")));
    int64_t model = json_integer_value(json_object_get(row, "id"));
    json_decref(row);
    CHECK_EQ_INT(models_import(db2, "another-name", file, len, &row, &created, &fault, part,
                               &taken, &err), GT_OK);
    CHECK_EQ_INT(created, 0);
    CHECK(strcmp(json_string_value(json_object_get(row, "name")), "tiny") == 0);
    json_decref(row);
    /* other content under a taken name; a bad name; a corrupt file */
    void *ofile = NULL;
    size_t olen = 0;
    CHECK_EQ_INT(models_export(db, other, &ofile, &olen, &err), GT_OK);
    CHECK_EQ_INT(models_import(db2, "tiny", ofile, olen, &row, &created, &fault, part, &taken,
                               &err), GT_EINVAL);
    CHECK_EQ_INT(taken, 1);
    CHECK_EQ_INT(models_import(db2, "12", ofile, olen, &row, &created, &fault, part, &taken,
                               &err), GT_EINVAL);
    CHECK_EQ_INT(taken, 0);
    CHECK_EQ_INT(models_import(db2, NULL, ofile, olen, &row, &created, &fault, part, &taken,
                               &err), GT_OK);
    CHECK_EQ_INT(created, 1);
    char want[64];
    snprintf(want, sizeof want, "run-%lld-", (long long)other);
    CHECK(strncmp(json_string_value(json_object_get(row, "name")), want, strlen(want)) == 0);
    json_decref(row);
    memcpy(bad, file, len);
    bad[sp[5].off + 10] ^= 0x10;
    CHECK(models_import(db2, "broken", bad, len, &row, &created, &fault, part, &taken, &err) !=
          GT_OK);
    CHECK_EQ_INT(fault, MODEL_PACK_FAULT_CORRUPT);
    CHECK(strcmp(part, "shower.ckpt") == 0);
    CHECK_EQ_INT(models_list(db2, &row, &err), GT_OK);
    CHECK_EQ_INT(json_array_size(row), 2);
    json_decref(row);
    void *stored = NULL;
    size_t sl = 0;
    char sum[65];
    CHECK_EQ_INT(models_file(db2, "tiny", NULL, &stored, &sl, sum, &err), GT_OK);
    CHECK(sl == len && memcmp(stored, file, len) == 0);
    free(stored);
    CHECK_EQ_INT(models_get(db2, "nope", &row, &err), GT_ENOTFOUND);

    /* the imported model serves the run's showers, bit for bit */
    float e[6] = {1000, 2500, 10000, 40000, 150000, 900000};
    sampling_job a, c;
    sample(db, run, 0, &a, e, 6);
    sample(db2, 0, model, &c, e, 6);
    CHECK(a.rc == GT_OK && c.rc == GT_OK && a.voxels == c.voxels && a.layers == c.layers);
    if (a.showers && c.showers)
        CHECK(memcmp(a.showers, c.showers, sizeof(float) * 6 * (size_t)a.voxels) == 0);
    free(a.showers);
    free(c.showers);

    /* format 2: a run with an acceptance test carries it as accept.bin */
    int64_t acc_run = train(db, "accepting", 10, 1);
    void *f2 = NULL, *acc = NULL;
    size_t l2 = 0, acc_len = 0;
    CHECK_EQ_INT(models_export(db, acc_run, &f2, &l2, &err), GT_OK);
    CHECK_EQ_INT(runs_load_acceptance(db, acc_run, &acc, &acc_len, &err), GT_OK);
    const uint8_t *b2 = f2;
    span sp2[8];
    CHECK(gt_le_get_u32(b2 + 8) == 2);
    CHECK_EQ_INT(spans_of(b2, l2, sp2), 7);
    CHECK(strcmp(sp2[6].name, "accept.bin") == 0 && sp2[6].size == acc_len &&
          memcmp(b2 + sp2[6].off, acc, acc_len) == 0);
    model_pack p2;
    CHECK_MSG(model_pack_read(f2, l2, &p2, &fault, part, &err) == GT_OK, "format 2: %s",
              err.message);
    CHECK_EQ_INT(p2.format_version, 2);
    CHECK(p2.accept_len == acc_len && memcmp(p2.accept, acc, acc_len) == 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(p2.manifest, "format_version")), 2);
    CHECK_EQ_INT(json_array_size(json_object_get(p2.manifest, "parts")), 6);
    json_t *ma = json_object_get(p2.manifest, "acceptance");
    CHECK(json_is_number(json_object_get(ma, "auc")) &&
          json_is_number(json_object_get(ma, "acceptance")) &&
          json_integer_value(json_object_get(ma, "max_attempts")) == 8);
    model_pack_free(&p2);
    {
        uint8_t *bad2 = malloc(l2);
        for (int i = 0; i < 7; i++) {
            char what[96];
            memcpy(bad2, f2, l2);
            bad2[sp2[i].off + sp2[i].size / 2] ^= 0x01;
            snprintf(what, sizeof what, "format 2: a byte of %.63s", sp2[i].name);
            expect_fault(bad2, l2, MODEL_PACK_FAULT_CORRUPT, sp2[i].name, what);
            snprintf(what, sizeof what, "format 2: cut inside %.63s", sp2[i].name);
            expect_fault(f2, sp2[i].off + sp2[i].size / 2, MODEL_PACK_FAULT_TRUNCATED,
                         sp2[i].name, what);
        }
        free(bad2);
    }
    /* a test of other checkpoints; one that reads another geometry's
     * features (every hash of the file right) */
    model_accept tst;
    CHECK_EQ_INT(model_accept_unpack(acc, acc_len, &tst, &err), GT_OK);
    {
        void *x = NULL, *fx = NULL;
        size_t xl = 0, fxl = 0;
        tst.ckpt_sha256[1][0] ^= 0x01;
        CHECK_EQ_INT(model_accept_pack(&tst, &x, &xl, &err), GT_OK);
        tst.ckpt_sha256[1][0] ^= 0x01;
        uint8_t *swapped = with_part(b2, l2, 6, x, xl, &fxl);
        expect_fault(swapped, fxl, MODEL_PACK_FAULT_CORRUPT, "accept.bin",
                     "a test of another shower.ckpt");
        {
            model_pack q;
            gt_error e2 = {0};
            CHECK(model_pack_read(swapped, fxl, &q, NULL, NULL, &e2) != GT_OK &&
                  strstr(e2.message, "shower.ckpt") != NULL);
        }
        free(swapped);
        /* the writer refuses to make such a file */
        char *config = NULL;
        CHECK_EQ_INT(runs_config(db, acc_run, &config, &err), GT_OK);
        model_pack_src src = {.run_id = acc_run, .giant_version = "test", .config_json = config,
                              .geometry_xml = xml, .geometry_len = xml_len,
                              .ckpt = {b2 + sp2[4].off, b2 + sp2[5].off},
                              .ckpt_len = {sp2[4].size, sp2[5].size},
                              .accept = x, .accept_len = xl};
        CHECK_EQ_INT(model_pack_write(&src, &fx, &fxl, &err), GT_EFORMAT);
        free(x);
        /* a network of one feature more than this geometry has */
        model_accept wide = tst;
        wide.net.d = tst.net.d + 1;
        wide.net.n_weights = model_classify_net_count(wide.net.d, tst.net.hidden, tst.net.depth);
        wide.net.weights = calloc(wide.net.n_weights, sizeof(float));
        wide.net.mean = calloc((size_t)wide.net.d, sizeof(double));
        wide.net.inv_std = calloc((size_t)wide.net.d, sizeof(double));
        CHECK_EQ_INT(model_accept_pack(&wide, &x, &xl, &err), GT_OK);
        model_accept_free(&wide);
        src.accept = x;
        src.accept_len = xl;
        CHECK_EQ_INT(model_pack_write(&src, &fx, &fxl, &err), GT_OK);
        expect_fault(fx, fxl, MODEL_PACK_FAULT_CORRUPT, "accept.bin",
                     "a test of another geometry's features");
        free(fx);
        /* the same checkpoints without the test: format 1, for the import
         * below */
        src.accept = NULL;
        src.accept_len = 0;
        CHECK_EQ_INT(model_pack_write(&src, &fx, &fxl, &err), GT_OK);
        CHECK(gt_le_get_u32((const uint8_t *)fx + 8) == 1);
        int64_t plain_model = 0;
        CHECK_EQ_INT(models_import(db2, "accepting-plain", fx, fxl, &row, &created, &fault, part,
                                   &taken, &err), GT_OK);
        plain_model = json_integer_value(json_object_get(row, "id"));
        json_decref(row);
        free(fx);
        free(x);
        free(config);
        /* imported, format 2 serves the run's showers, the test applied:
         * the same bytes as the run, and rows that differ from the same
         * checkpoints without it */
        CHECK_MSG(models_import(db2, "accepting", f2, l2, &row, &created, &fault, part, &taken,
                                &err) == GT_OK, "%s", err.message);
        int64_t acc_model = json_integer_value(json_object_get(row, "id"));
        CHECK(json_is_object(json_object_get(json_object_get(row, "manifest"), "acceptance")));
        json_decref(row);
        enum { NR = 16 };
        float er[NR];
        for (int i = 0; i < NR; i++)
            er[i] = 1000.0f * (float)(1 + 37 * i);
        sampling_job ra, ia, ip;
        sample(db, acc_run, 0, &ra, er, NR);
        sample(db2, 0, acc_model, &ia, er, NR);
        sample(db2, 0, plain_model, &ip, er, NR);
        int redrawn = 0;
        if (ra.showers && ia.showers && ip.showers) {
            CHECK(memcmp(ra.showers, ia.showers, sizeof(float) * NR * (size_t)ra.voxels) == 0);
            for (int i = 0; i < NR; i++)
                redrawn += memcmp(ia.showers + (size_t)i * ia.voxels,
                                  ip.showers + (size_t)i * ip.voxels,
                                  sizeof(float) * (size_t)ia.voxels) != 0;
        }
        CHECK_MSG(redrawn > 0 && redrawn < NR, "%d of %d rows drawn again", redrawn, NR);
        free(ra.showers);
        free(ia.showers);
        free(ip.showers);
    }
    model_accept_free(&tst);
    free(acc);
    free(f2);

    free(ofile);
    free(bad);
    free(file);
    store_close(db2, NULL);
    store_close(db, NULL);
    return check_finish();
}
