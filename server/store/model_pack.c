#include "model_pack.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "geo.h"
#include "gt_le.h"
#include "model_accept.h"
#include "model_ckpt.h"
#include "model_config.h"
#include "model_data.h"
#include "numfmt.h"

#define MAGIC "GIANTPKG"
#define END_MAGIC "GIANTEND"
#define HEADER 16                  /* magic, version, part count          */
#define TRAILER (8 + 32)           /* end magic, sha256 of the manifest   */
#define MAX_NAME 63

/* The parts a file holds after the manifest, in this order: format 1 the
 * first five, format 2 all six. */
enum { P_CONFIG, P_GEOMETRY, P_TRANSFORMS, P_ENERGY, P_SHOWER, P_ACCEPT, P_COUNT };
static const char *const part_names[P_COUNT] = {"config.json", "geometry.xml",
                                                "transforms.bin", "energy.ckpt",
                                                "shower.ckpt", "accept.bin"};

/* The parts after the manifest in a file of this format. */
static int parts_of(uint32_t version) { return version >= 2 ? P_COUNT : P_ACCEPT; }

const char *model_pack_fault_code(model_pack_fault f)
{
    switch (f) {
    case MODEL_PACK_FAULT_CORRUPT: return "model_corrupt";
    case MODEL_PACK_FAULT_TRUNCATED: return "model_truncated";
    case MODEL_PACK_FAULT_VERSION: return "model_version_unsupported";
    case MODEL_PACK_FAULT_GEOMETRY: return "geometry_mismatch";
    default: return "";
    }
}

static void sha256(const void *buf, size_t len, unsigned char md[32])
{
    unsigned int n = 0;
    EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL);
}

static void hex(const unsigned char md[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    out[64] = '\0';
}

/* sha256 over (name, NUL, sha256 of the data) of every part but the
 * manifest, in file order: the model's identity whatever wrote its
 * manifest. */
static void content_hash(const unsigned char md[P_COUNT][32], int parts, char out[65])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char sum[32];
    unsigned int n = 0;
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (int i = 0; i < parts; i++) {
        EVP_DigestUpdate(ctx, part_names[i], strlen(part_names[i]) + 1);
        EVP_DigestUpdate(ctx, md[i], 32);
    }
    EVP_DigestFinal_ex(ctx, sum, &n);
    EVP_MD_CTX_free(ctx);
    hex(sum, out);
}

/* ---------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------- */

static json_t *ckpt_json(const model_ckpt_view *v)
{
    /* NaN is no JSON number: null */
    return json_pack("{s:I, s:o}", "step", (json_int_t)v->step, "val_loss",
                     isfinite(v->val_loss) ? json_real(numfmt_float_as_double(v->val_loss))
                                             : json_null());
}

int model_pack_write(const model_pack_src *src, void **out, size_t *out_len, gt_error *err)
{
    *out = NULL;
    *out_len = 0;
    model_ckpt_view v[2];
    for (int s = 0; s < 2; s++) {
        int rc = model_ckpt_unpack(src->ckpt[s], src->ckpt_len[s], &v[s], err);
        if (rc)
            return gt_error_wrap(err, "the %s checkpoint", s == 0 ? "energy" : "shower");
        if (v[s].stage != s + 1)
            return gt_error_set(err, GT_EFORMAT, "the stage-%d checkpoint names stage %d", s + 1,
                                v[s].stage);
    }
    if (src->geometry_len > INT_MAX)
        return gt_error_set(err, GT_EINVAL, "a geometry file of %zu bytes", src->geometry_len);
    geo_geometry g;
    memset(&g, 0, sizeof g);
    int rc = geo_load_memory(&g, src->geometry_xml, (int)src->geometry_len, err);
    if (rc)
        return gt_error_wrap(err, "geometry.xml");
    int voxels = g.n_voxels, layers = g.n_layers;
    geo_free(&g);
    const uint32_t version = src->accept ? 2 : 1;
    const int nparts = parts_of(version);
    const void *data[P_COUNT] = {src->config_json, src->geometry_xml, v[1].repr,
                                 src->ckpt[0], src->ckpt[1], src->accept};
    size_t size[P_COUNT] = {strlen(src->config_json), src->geometry_len, v[1].repr_len,
                            src->ckpt_len[0], src->ckpt_len[1], src->accept_len};
    unsigned char md[P_COUNT][32];
    for (int i = 0; i < nparts; i++)
        sha256(data[i], size[i], md[i]);
    /* the test, when there is one: it must be of these two checkpoints */
    json_t *acceptance = NULL;
    if (src->accept) {
        model_accept a;
        if (model_accept_unpack(src->accept, src->accept_len, &a, err) != GT_OK)
            return gt_error_wrap(err, "the acceptance test");
        int same = memcmp(a.ckpt_sha256[0], md[P_ENERGY], 32) == 0 &&
                   memcmp(a.ckpt_sha256[1], md[P_SHOWER], 32) == 0;
        acceptance = json_pack("{s:o, s:o, s:i}", "auc",
                               json_real(numfmt_float_as_double((float)a.auc)), "acceptance",
                               json_real(numfmt_float_as_double((float)a.acceptance)),
                               "max_attempts", a.max_attempts);
        model_accept_free(&a);
        if (!same) {
            json_decref(acceptance);
            return gt_error_set(err, GT_EFORMAT,
                                "the acceptance test was trained against other checkpoints");
        }
    }
    /* the geometry as a reader of the config takes it (model_pack_config);
     * a config that does not read names none, and the reader refuses it */
    model_config cfg;
    gt_error ignored = {0};
    const char *geometry =
        model_config_parse_stored(src->config_json, strlen(src->config_json), &cfg, NULL, 0,
                                  &ignored) == GT_OK
            ? cfg.geometry
            : "";

    char content[65], sum[65];
    json_t *parts = json_array();
    for (int i = 0; i < nparts; i++) {
        hex(md[i], sum);
        json_array_append_new(parts, json_pack("{s:s, s:I, s:s}", "name", part_names[i], "size",
                                               (json_int_t)size[i], "sha256", sum));
    }
    content_hash(md, nparts, content);
    json_t *man = json_pack(
        "{s:s, s:i, s:s, s:{s:s, s:s}, s:{s:I, s:s?}, s:{s:s, s:i, s:i}, s:{s:o, s:o}, s:o}",
        "format", "giant-model", "format_version", (int)version, "content_sha256", content,
        "giant", "version", src->giant_version ? src->giant_version : "",
        "git_commit", src->git_commit ? src->git_commit : "",
        "run", "id", (json_int_t)src->run_id, "name", src->run_name,
        "geometry", "name", geometry, "voxels", voxels, "layers", layers,
        "checkpoints", "energy", ckpt_json(&v[0]), "shower", ckpt_json(&v[1]),
        "parts", parts);
    if (man && acceptance)
        json_object_set(man, "acceptance", acceptance);
    json_decref(acceptance);
    /* sorted keys, no clock: the same run exports to the same bytes */
    char *mtext = man ? numfmt_dumps(man, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(man);
    if (!mtext)
        return gt_error_set(err, GT_ENOMEM, "out of memory writing the manifest");
    size_t mlen = strlen(mtext);

    size_t total = HEADER + 2 + strlen("manifest.json") + 8 + mlen + TRAILER;
    for (int i = 0; i < nparts; i++)
        total += 2 + strlen(part_names[i]) + 8 + size[i];
    uint8_t *b = malloc(total);
    if (!b) {
        free(mtext);
        return gt_error_set(err, GT_ENOMEM, "out of memory for a %zu-byte model file", total);
    }
    memcpy(b, MAGIC, 8);
    gt_le_put_u32(b + 8, version);
    gt_le_put_u32(b + 12, (uint32_t)(1 + nparts));
    size_t off = HEADER;
    for (int i = -1; i < nparts; i++) {
        const char *name = i < 0 ? "manifest.json" : part_names[i];
        const void *d = i < 0 ? mtext : data[i];
        size_t n = i < 0 ? mlen : size[i];
        size_t nl = strlen(name);
        gt_le_put_u16(b + off, (uint16_t)nl);
        memcpy(b + off + 2, name, nl);
        off += 2 + nl;
        gt_le_put_u64(b + off, n);
        off += 8;
        if (n)
            memcpy(b + off, d, n);
        off += n;
    }
    memcpy(b + off, END_MAGIC, 8);
    sha256(mtext, mlen, b + off + 8);
    free(mtext);
    *out = b;
    *out_len = total;
    return GT_OK;
}

/* ---------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------- */

static int refuse(model_pack_fault *fault, model_pack_fault f, char *part, const char *name,
                  gt_error *err, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int refuse(model_pack_fault *fault, model_pack_fault f, char *part, const char *name,
                  gt_error *err, const char *fmt, ...)
{
    *fault = f;
    if (part)
        snprintf(part, 64, "%s", name ? name : "");
    char msg[480];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gt_error_set(err, f == MODEL_PACK_FAULT_VERSION ? GT_EUNSUPPORTED : GT_EFORMAT, "%s",
                        msg);
}

void model_pack_free(model_pack *p)
{
    if (p) {
        json_decref(p->manifest);
        memset(p, 0, sizeof *p);
    }
}

typedef struct part_view {
    char name[MAX_NAME + 1];
    const uint8_t *data;
    size_t size;
} part_view;

int model_pack_config(const model_pack *p, model_config *cfg, char *field, size_t field_len,
                      gt_error *err)
{
    /* a stored config: what it leaves out means what it did when written */
    return model_config_parse_stored(p->config_json, p->config_len, cfg, field, field_len, err);
}

/* accept.bin (format 2): an acceptance test of these two checkpoints that
 * reads the features of geometry g's showers. */
static int check_accept(const model_pack *p, const geo_geometry *g, model_pack_fault *fault,
                        char *part, gt_error *err)
{
    model_accept acc;
    if (model_accept_unpack(p->accept, p->accept_len, &acc, err) != GT_OK)
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "accept.bin", err,
                      "accept.bin: %s", err->message);
    int rc = GT_OK;
    unsigned char md[32];
    for (int s = 0; s < 2 && rc == GT_OK; s++) {
        sha256(p->ckpt[s], p->ckpt_len[s], md);
        if (memcmp(md, acc.ckpt_sha256[s], 32) != 0)
            rc = refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "accept.bin", err,
                        "accept.bin was trained against another %s", part_names[P_ENERGY + s]);
    }
    if (rc == GT_OK && model_accept_fits(&acc, g, err) != GT_OK)
        rc = refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "accept.bin", err, "accept.bin: %s",
                    err->message);
    model_accept_free(&acc);
    return rc;
}

/* The contents once every part hashed right: what makes a file a model
 * this build can serve. */
static int check_contents(model_pack *p, model_pack_fault *fault, char *part, gt_error *err)
{
    model_config cfg;
    char field[128] = "";
    int rc = model_pack_config(p, &cfg, field, sizeof field, err);
    if (rc)
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "config.json", err,
                      "config.json: %s%s%s", field[0] ? field : "", field[0] ? ": " : "",
                      err->message);
    snprintf(p->geometry, sizeof p->geometry, "%s", cfg.geometry);
    model_ckpt_view v[2];
    for (int s = 0; s < 2; s++) {
        const char *name = part_names[P_ENERGY + s];
        if (model_ckpt_unpack(p->ckpt[s], p->ckpt_len[s], &v[s], err) != GT_OK)
            return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, name, err, "%s: %s", name,
                          err->message);
        if (v[s].stage != s + 1)
            return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, name, err,
                          "%s holds a stage-%d checkpoint", name, v[s].stage);
    }
    if (v[1].repr_len != p->transforms_len ||
        memcmp(v[1].repr, p->transforms, p->transforms_len) != 0)
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "transforms.bin", err,
                      "transforms.bin differs from the transforms of shower.ckpt");
    /* the geometry: the built-in file itself when the config names one (a
     * file of another geometry would serve showers on the wrong voxels),
     * and in any case one the transforms were fitted on */
    const void *builtin = NULL;
    size_t builtin_len = 0;
    if (model_geometry_is_builtin(cfg.geometry) &&
        model_geometry_builtin_xml(cfg.geometry, &builtin, &builtin_len, NULL) == GT_OK &&
        (builtin_len != p->geometry_len || memcmp(builtin, p->geometry_xml, builtin_len) != 0))
        return refuse(fault, MODEL_PACK_FAULT_GEOMETRY, part, "geometry.xml", err,
                      "geometry.xml is not the built-in geometry '%s' that config.json names",
                      cfg.geometry);
    const char *mname = json_string_value(
        json_object_get(json_object_get(p->manifest, "geometry"), "name"));
    if (!mname || strcmp(mname, cfg.geometry) != 0)
        return refuse(fault, MODEL_PACK_FAULT_GEOMETRY, part, "manifest.json", err,
                      "the manifest names geometry '%s', config.json '%s'", mname ? mname : "",
                      cfg.geometry);
    geo_geometry g;
    memset(&g, 0, sizeof g);
    float threshold = 0;
    model_repr repr;
    if (p->geometry_len > INT_MAX ||
        geo_load_memory(&g, p->geometry_xml, (int)p->geometry_len, err) != GT_OK) {
        geo_free(&g);
        return refuse(fault, MODEL_PACK_FAULT_GEOMETRY, part, "geometry.xml", err,
                      "geometry.xml: %s", err->message);
    }
    if (model_geometry_threshold(&g, &threshold, err) != GT_OK ||
        model_repr_from_bytes(&repr, &g, threshold, p->transforms, p->transforms_len, err) !=
            GT_OK) {
        geo_free(&g);
        return refuse(fault, MODEL_PACK_FAULT_GEOMETRY, part, "geometry.xml", err,
                      "geometry.xml does not fit the model's transforms: %s", err->message);
    }
    model_repr_free(&repr);
    if (p->accept && (rc = check_accept(p, &g, fault, part, err)) != GT_OK) {
        geo_free(&g);
        return rc;
    }
    p->voxels = g.n_voxels;
    p->layers = g.n_layers;
    geo_free(&g);
    return GT_OK;
}

/* The frame of a model file after its checked header (format `version`):
 * each part's name and size in their order, then the trailer with the
 * manifest's sha256, checked.  pv gets the parts, the manifest first. */
static int read_frame(const uint8_t *b, size_t len, uint32_t version, part_view pv[1 + P_COUNT],
                      model_pack_fault *fault, char part[64], gt_error *err)
{
    const int nparts = parts_of(version);
    uint32_t n = gt_le_get_u32(b + 12);
    if (n != (uint32_t)(1 + nparts))
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "", err,
                      "the header says %u parts, format %u has %d", n, version, 1 + nparts);
    size_t off = HEADER;
    for (uint32_t i = 0; i < n; i++) {
        const char *want = i == 0 ? "manifest.json" : part_names[i - 1];
        if (len - off < 2)
            return refuse(fault, MODEL_PACK_FAULT_TRUNCATED, part, want, err,
                          "the file ends before part %u (%s)", i, want);
        size_t nl = gt_le_get_u16(b + off);
        if (nl > MAX_NAME || nl != strlen(want))
            return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, want, err,
                          "part %u should be %s: its name is %zu bytes long", i, want, nl);
        if (len - off - 2 < nl + 8)
            return refuse(fault, MODEL_PACK_FAULT_TRUNCATED, part, want, err,
                          "the file ends inside the header of part %u (%s)", i, want);
        if (memcmp(b + off + 2, want, nl) != 0)
            return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, want, err,
                          "part %u should be %s", i, want);
        memcpy(pv[i].name, want, nl + 1);
        off += 2 + nl;
        uint64_t size = gt_le_get_u64(b + off);
        off += 8;
        if (size > len - off)
            return refuse(fault, MODEL_PACK_FAULT_TRUNCATED, part, want, err,
                          "%s is %llu bytes and the file ends %zu bytes into it", want,
                          (unsigned long long)size, len - off);
        pv[i].data = b + off;
        pv[i].size = (size_t)size;
        off += (size_t)size;
    }
    if (len - off < TRAILER)
        return refuse(fault, MODEL_PACK_FAULT_TRUNCATED, part, "", err,
                      "the file ends before its trailer (%zu of %d bytes)", len - off, TRAILER);
    if (len - off > TRAILER)
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "", err,
                      "%zu bytes follow the trailer", len - off - TRAILER);
    if (memcmp(b + off, END_MAGIC, 8) != 0)
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "", err,
                      "the trailer does not start with \"" END_MAGIC "\"");
    unsigned char md[32];
    sha256(pv[0].data, pv[0].size, md);
    if (memcmp(md, b + off + 8, 32) != 0)
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "manifest.json", err,
                      "manifest.json does not hash to the sha256 in the trailer");
    return GT_OK;
}

/* The manifest (parsed into p->manifest) against the parts it lists: the
 * same format version, each part with its size and sha256, and the content
 * hash of them all (p->content_sha256).  On a refusal p is freed. */
static int read_manifest(const part_view *pv, uint32_t version, model_pack *p,
                         model_pack_fault *fault, char part[64], gt_error *err)
{
    const int nparts = parts_of(version);
    json_error_t je;
    p->manifest = json_loadb((const char *)pv[0].data, pv[0].size, JSON_REJECT_DUPLICATES, &je);
    json_t *m = p->manifest;
    json_t *fv = json_object_get(m, "format_version");
    if (!json_is_object(m) || !json_is_integer(fv)) {
        model_pack_free(p);
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "manifest.json", err,
                      "manifest.json is not a manifest");
    }
    if (json_integer_value(fv) > MODEL_PACK_VERSION) {
        long long got = (long long)json_integer_value(fv);
        model_pack_free(p);
        return refuse(fault, MODEL_PACK_FAULT_VERSION, part, "manifest.json", err,
                      "manifest.json: format_version %lld is newer than this giant reads (%d)",
                      got, MODEL_PACK_VERSION);
    }
    if (json_integer_value(fv) != (json_int_t)version) {
        long long got = (long long)json_integer_value(fv);
        model_pack_free(p);
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "manifest.json", err,
                      "manifest.json says format %lld, the header %u", got, version);
    }
    json_t *parts = json_object_get(m, "parts");
    if (!json_is_array(parts) || json_array_size(parts) != (size_t)nparts) {
        model_pack_free(p);
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "manifest.json", err,
                      "the manifest lists %zu parts, format %u has %d",
                      json_is_array(parts) ? json_array_size(parts) : 0, version, nparts);
    }
    unsigned char sums[P_COUNT][32];
    for (int i = 0; i < nparts; i++) {
        json_t *e = json_array_get(parts, (size_t)i);
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *want = json_string_value(json_object_get(e, "sha256"));
        json_t *size = json_object_get(e, "size");
        const part_view *v = &pv[i + 1];
        if (!name || strcmp(name, v->name) != 0 || !want || !json_is_integer(size)) {
            model_pack_free(p);
            return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "manifest.json", err,
                          "the manifest's part %d is not %s with its size and sha256", i + 1,
                          v->name);
        }
        if ((json_int_t)v->size != json_integer_value(size)) {
            long long msize = (long long)json_integer_value(size);
            model_pack_free(p);
            return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, v->name, err,
                          "%s is %zu bytes, the manifest says %lld", v->name, v->size, msize);
        }
        char got[65];
        sha256(v->data, v->size, sums[i]);
        hex(sums[i], got);
        if (strcmp(got, want) != 0) {
            /* the message first: want lives in the manifest */
            int rc = refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, v->name, err,
                            "%s is corrupt: its sha256 is %s, the manifest says %s", v->name,
                            got, want);
            model_pack_free(p);
            return rc;
        }
    }
    content_hash(sums, nparts, p->content_sha256);
    const char *mc = json_string_value(json_object_get(m, "content_sha256"));
    if (!mc || strcmp(mc, p->content_sha256) != 0) {
        model_pack_free(p);
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "manifest.json", err,
                      "the manifest's content_sha256 is not the parts' hash");
    }
    return GT_OK;
}

int model_pack_read(const void *buf, size_t len, model_pack *p, model_pack_fault *fault,
                    char part[64], gt_error *err)
{
    const uint8_t *b = buf;
    model_pack_fault dummy;
    if (!fault)
        fault = &dummy;
    *fault = MODEL_PACK_FAULT_NONE;
    if (part)
        part[0] = '\0';
    memset(p, 0, sizeof *p);
    if (len < 8 && (len == 0 || memcmp(b, MAGIC, len) == 0))
        return refuse(fault, MODEL_PACK_FAULT_TRUNCATED, part, "", err,
                      "the file ends after %zu bytes, inside its header", len);
    if (len < 8 || memcmp(b, MAGIC, 8) != 0)
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "", err,
                      "not a giant model file (it does not start with \"" MAGIC "\")");
    if (len < HEADER)
        return refuse(fault, MODEL_PACK_FAULT_TRUNCATED, part, "", err,
                      "the file ends after %zu bytes, inside its header", len);
    /* the version first: a newer format may lay out everything after it
     * otherwise, and is then no fault of the file's */
    uint32_t version = gt_le_get_u32(b + 8);
    if (version > MODEL_PACK_VERSION)
        return refuse(fault, MODEL_PACK_FAULT_VERSION, part, "", err,
                      "model file format %u is newer than this giant reads (%d): import it "
                      "with a newer giant",
                      version, MODEL_PACK_VERSION);
    if (version < 1)
        return refuse(fault, MODEL_PACK_FAULT_CORRUPT, part, "", err,
                      "model file format 0 does not exist");
    part_view pv[1 + P_COUNT];
    int rc;
    if ((rc = read_frame(b, len, version, pv, fault, part, err)) != GT_OK ||
        (rc = read_manifest(pv, version, p, fault, part, err)) != GT_OK)
        return rc;
    const int nparts = parts_of(version);
    p->run_id = (int64_t)json_integer_value(
        json_object_get(json_object_get(p->manifest, "run"), "id"));
    p->config_json = (const char *)pv[1 + P_CONFIG].data;
    p->config_len = pv[1 + P_CONFIG].size;
    p->geometry_xml = pv[1 + P_GEOMETRY].data;
    p->geometry_len = pv[1 + P_GEOMETRY].size;
    p->transforms = pv[1 + P_TRANSFORMS].data;
    p->transforms_len = pv[1 + P_TRANSFORMS].size;
    for (int s = 0; s < 2; s++) {
        p->ckpt[s] = pv[1 + P_ENERGY + s].data;
        p->ckpt_len[s] = pv[1 + P_ENERGY + s].size;
    }
    p->format_version = (int)version;
    if (nparts > P_ACCEPT) {
        p->accept = pv[1 + P_ACCEPT].data;
        p->accept_len = pv[1 + P_ACCEPT].size;
    }
    rc = check_contents(p, fault, part, err);
    if (rc)
        model_pack_free(p);
    return rc;
}
