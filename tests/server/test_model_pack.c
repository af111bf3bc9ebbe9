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
 * gives for the same jobs. */
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "gt_le.h"
#include "model_config.h"
#include "model_data.h"
#include "model_pack.h"
#include "models.h"
#include "runs.h"
#include "sampling.h"
#include "scheduler.h"
#include "store.h"
#include "svc_harness.h"

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

static int64_t train(store *db, const char *name, int steps)
{
    char *text = svc_tiny_config(name, steps, 5, 5, NULL);
    model_config cfg;
    char field[128];
    gt_error err = {0};
    int64_t id = 0;
    CHECK_EQ_INT(model_config_parse(text, strlen(text), &cfg, field, sizeof field, &err), GT_OK);
    free(text);
    /* recorded as the service records it: every default filled in */
    json_t *canon = model_config_to_json(&cfg);
    text = json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(canon);
    CHECK_EQ_INT(runs_create(db, cfg.name, text, "fp32", NULL, cfg.steps1 + cfg.steps2, &id,
                             &err), GT_OK);
    free(text);
    CHECK_MSG(sched_train_run(db, id, ".", "cpu", MODEL_BF16_NATIVE, NULL, &err) == GT_OK,
              "training: %s", err.message);
    return id;
}

/* Where each part's data lies in a file: offsets and sizes, in file order. */
typedef struct span {
    char name[64];
    size_t off, size;
} span;

static int spans_of(const uint8_t *b, size_t len, span *out)
{
    uint32_t n = gt_le_get_u32(b + 12);
    size_t off = 16;
    for (uint32_t i = 0; i < n && off < len; i++) {
        size_t nl = gt_le_get_u16(b + off);
        memcpy(out[i].name, b + off + 2, nl);
        out[i].name[nl] = '\0';
        off += 2 + nl;
        out[i].size = (size_t)gt_le_get_u64(b + off);
        off += 8;
        out[i].off = off;
        off += out[i].size;
    }
    return (int)n;
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
    span sp[8];
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

/* The sampling worker's jobs, waited for. */
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
    int64_t run = train(db, "exported", 10);
    int64_t other = train(db, "other", 5);
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
    span sp[8];
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
    gt_le_put_u32(bad + 8, 2);
    expect_fault(bad, len, MODEL_PACK_FAULT_VERSION, "", "header version 2");
    {
        char *mtext = malloc(sp[0].size + 1);
        memcpy(mtext, b + sp[0].off, sp[0].size);
        mtext[sp[0].size] = '\0';
        char *at = strstr(mtext, "\"format_version\":1");
        CHECK(at != NULL);
        if (at) {
            at[strlen("\"format_version\":")] = '2';
            size_t nl = 0;
            uint8_t *v2 = with_manifest(b, len, mtext, &nl);
            expect_fault(v2, nl, MODEL_PACK_FAULT_VERSION, "manifest.json", "manifest version 2");
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
            char *old = json_dumps(cj, JSON_COMPACT);
            model_pack_src o = src;
            o.config_json = old;
            void *of = NULL;
            size_t ol = 0;
            model_pack op;
            model_config oc;
            CHECK_EQ_INT(model_pack_write(&o, &of, &ol, &err), GT_OK);
            CHECK_EQ_INT(model_pack_read(of, ol, &op, NULL, NULL, &err), GT_OK);
            CHECK_EQ_INT(model_pack_config(&op, &oc, NULL, 0, &err), GT_OK);
            CHECK_EQ_INT(oc.symmetrize, 0);
            CHECK_EQ_INT(oc.stage2.count_stick, 0);
            CHECK_EQ_INT(oc.stage1.profile, 0);
            model_pack_free(&op);
            CHECK_EQ_INT(model_pack_read(file, len, &op, NULL, NULL, &err), GT_OK);
            CHECK_EQ_INT(model_pack_config(&op, &oc, NULL, 0, &err), GT_OK);
            CHECK_EQ_INT(oc.symmetrize, 1);
            CHECK_EQ_INT(oc.stage2.count_stick, 1);
            CHECK_EQ_INT(oc.stage1.profile, 1);
            model_pack_free(&op);
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

    free(ofile);
    free(bad);
    free(file);
    store_close(db2, NULL);
    store_close(db, NULL);
    return check_finish();
}
