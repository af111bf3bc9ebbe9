#include "replica.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <unistd.h>

#include "auth_tokens.h"
#include "giant_client.h"
#include "log.h"
#include "models.h"

#define REPLICA_MAX_MODELS 256     /* a replica serves a handful; this bounds
                                      the listing, not the memory */

enum { STATE_LOADING, STATE_LOADED, STATE_FAILED };

struct replica {
    char dir[1024];
    char url[1024];                /* --model-url: the last entry, after the files */
    char token[512];
    int n;
    char names[REPLICA_MAX_MODELS][MODELS_NAME_MAX + 1];
    char files[REPLICA_MAX_MODELS][256];
    atomic_int loaded;             /* names[0..loaded) are registered */
    atomic_int state;
};

static int by_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

int replica_new(replica **out, const char *dir, const char *url, const char *token,
                gt_error *err)
{
    *out = NULL;
    DIR *d = NULL;
    if (dir && dir[0] && !(d = opendir(dir)))
        return gt_error_set(err, GT_EIO, "models directory %s: %s", dir, strerror(errno));
    replica *r = calloc(1, sizeof *r);
    if (!r) {
        if (d)
            closedir(d);
        return gt_error_set(err, GT_ENOMEM, "replica: out of memory");
    }
    snprintf(r->dir, sizeof r->dir, "%s", dir ? dir : "");
    snprintf(r->url, sizeof r->url, "%s", url ? url : "");
    snprintf(r->token, sizeof r->token, "%s", token ? token : "");
    int rc = GT_OK;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len <= 6 || strcmp(e->d_name + len - 6, ".giant") != 0 || e->d_name[0] == '.')
            continue;
        if (r->n == REPLICA_MAX_MODELS) {
            rc = gt_error_set(err, GT_EINVAL, "models directory %s: more than %d model files",
                              dir, REPLICA_MAX_MODELS);
            break;
        }
        if (len >= sizeof r->files[0]) {
            rc = gt_error_set(err, GT_EINVAL, "models directory %s: file name too long", dir);
            break;
        }
        memcpy(r->files[r->n++], e->d_name, len + 1);
    }
    if (d)
        closedir(d);
    if (rc == GT_OK && r->n == 0 && !r->url[0])
        rc = gt_error_set(err, GT_EINVAL, "models directory %s has no *.giant file (giant"
                          " export RUN -o %s/NAME.giant makes one)", dir, dir);
    /* Sorted, so every replica of a directory registers the same models in
     * the same order (same ids, same names when two files hold one model). */
    qsort(r->files, (size_t)r->n, sizeof r->files[0], by_name);
    for (int i = 0; rc == GT_OK && i < r->n; i++) {
        size_t len = strlen(r->files[i]) - 6;
        if (len > MODELS_NAME_MAX)
            len = MODELS_NAME_MAX + 1;     /* refused just below */
        char name[MODELS_NAME_MAX + 2];
        snprintf(name, sizeof name, "%.*s", (int)len, r->files[i]);
        if (!models_name_ok(name))
            rc = gt_error_set(err, GT_EINVAL, "model file %s/%s: '%s' is not a model name"
                              " (1 to 64 of A-Z a-z 0-9 . _ -, not all digits): rename it",
                              dir, r->files[i], name);
        else
            memcpy(r->names[i], name, strlen(name) + 1);   /* models_name_ok: <= 64 */
    }
    if (rc == GT_OK && r->url[0]) {
        if (r->n == REPLICA_MAX_MODELS)
            rc = gt_error_set(err, GT_EINVAL, "more than %d models", REPLICA_MAX_MODELS);
        else
            snprintf(r->files[r->n++], sizeof r->files[0], "%s", "(--model-url)");
    }
    if (rc) {
        free(r);
        return rc;
    }
    *out = r;
    return GT_OK;
}

/* The model file at r->url: "http://host:port" and the path split for the
 * client library, the name from ".../v1/models/NAME/file" (NULL for a run's
 * model: models_import names it run-<id>-<hash>). */
static int fetch_model(const replica *r, size_t max, void **buf, size_t *len,
                       char name[MODELS_NAME_MAX + 1], gt_error *err)
{
    const char *scheme = strstr(r->url, "://");
    const char *path = scheme ? strchr(scheme + 3, '/') : NULL;
    if (!path)
        return gt_error_set(err, GT_EINVAL, "--model-url '%s' is not http://HOST:PORT/PATH",
                            r->url);
    char base[1024];
    snprintf(base, sizeof base, "%.*s", (int)(path - r->url), r->url);
    name[0] = '\0';
    const char *m = strstr(path, "/v1/models/");
    if (m) {
        const char *n0 = m + strlen("/v1/models/"), *n1 = strchr(n0, '/');
        if (n1 && strcmp(n1, "/file") == 0 && n1 - n0 <= MODELS_NAME_MAX)
            snprintf(name, MODELS_NAME_MAX + 1, "%.*s", (int)(n1 - n0), n0);
    }
    gc_client *c = NULL;
    gc_response resp = {0};
    int rc = gc_open(&c, base, err);
    if (!rc && r->token[0])
        rc = gc_set_token(c, r->token, err);
    if (!rc)
        rc = gc_request_retrying(c, "GET", path, NULL, NULL, 0, NULL, &resp, err);
    if (!rc && resp.status != 200)
        rc = gt_error_set(err, GT_EIO, "GET %s: status %ld: %.200s", r->url, resp.status,
                          resp.body ? resp.body : "");
    if (!rc && resp.len > max)
        rc = gt_error_set(err, GT_EINVAL, "%s: %zu bytes, over --max-model-bytes %zu", r->url,
                          resp.len, max);
    if (!rc) {
        *buf = malloc(resp.len ? resp.len : 1);
        if (*buf) {
            memcpy(*buf, resp.body, resp.len);
            *len = resp.len;
        } else {
            rc = gt_error_set(err, GT_ENOMEM, "out of memory");
        }
    }
    gc_response_free(&resp);
    gc_close(c);
    return rc;
}

/* The whole file, at most max bytes. */
static int read_model_file(const char *path, size_t max, void **buf, size_t *len, gt_error *err)
{
    struct stat st;
    FILE *f = fopen(path, "rb");
    if (!f || fstat(fileno(f), &st) != 0) {
        int e = errno;
        if (f)
            fclose(f);
        return gt_error_set(err, GT_EIO, "%s: %s", path, strerror(e));
    }
    if ((unsigned long long)st.st_size > max) {
        fclose(f);
        return gt_error_set(err, GT_EINVAL, "%s: %lld bytes, over --max-model-bytes %zu", path,
                            (long long)st.st_size, max);
    }
    *buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    *len = *buf ? fread(*buf, 1, (size_t)st.st_size, f) : 0;
    int bad = !*buf || ferror(f);
    fclose(f);
    if (bad) {
        free(*buf);
        *buf = NULL;
        return gt_error_set(err, GT_EIO, "%s: cannot read it", path);
    }
    return GT_OK;
}

int replica_load(replica *r, store *db, size_t max_bytes, gt_error *err)
{
    for (int i = 0; i < r->n; i++) {
        int fetched = r->url[0] && i == r->n - 1;
        char path[1400], url_name[MODELS_NAME_MAX + 1] = "";
        snprintf(path, sizeof path, "%s/%s", r->dir, r->files[i]);
        if (fetched)
            snprintf(path, sizeof path, "%s", r->url);
        void *buf = NULL;
        size_t len = 0;
        json_t *row = NULL;
        int created = 0, taken = 0;
        model_pack_fault fault = MODEL_PACK_FAULT_NONE;
        char part[64] = "";
        gt_error e = {0};
        int rc = fetched ? fetch_model(r, max_bytes, &buf, &len, url_name, &e)
                         : read_model_file(path, max_bytes, &buf, &len, &e);
        if (!rc)
            rc = models_import(db, fetched ? (url_name[0] ? url_name : NULL) : r->names[i],
                               buf, len, &row, &created, &fault, part, &taken, &e);
        /* a fetched model's name is known once it is registered */
        if (!rc && fetched)
            snprintf(r->names[i], sizeof r->names[i], "%s",
                     json_string_value(json_object_get(row, "name")));
        free(buf);
        if (rc) {
            atomic_store(&r->state, STATE_FAILED);
            return gt_error_set(err, rc, "model %s: %s%s%s", path,
                                fault ? model_pack_fault_code(fault) : "", fault ? ": " : "",
                                e.message);
        }
        if (!created)
            /* the same content twice: served under the first file's name */
            log_msg(LOG_WARN, "replica", "file=%s same_as=%s note=\"the same model as an earlier"
                    " file; served under that name only\"", r->files[i],
                    json_string_value(json_object_get(row, "name")));
        else
            log_msg(LOG_INFO, "replica", "model=%s file=%s bytes=%zu content_sha256=%s",
                    r->names[i], r->files[i], len,
                    json_string_value(json_object_get(row, "content_sha256")));
        json_decref(row);
        if (created)
            atomic_fetch_add(&r->loaded, 1);
        else
            r->names[i][0] = '\0';         /* not a name this replica serves */
    }
    atomic_store(&r->state, STATE_LOADED);
    return GT_OK;
}

int replica_ready(const replica *r)
{
    return r && atomic_load(&((replica *)r)->state) == STATE_LOADED;
}

json_t *replica_models_json(const replica *r)
{
    static const char *const states[] = {"loading", "loaded", "failed"};
    int loaded = atomic_load(&((replica *)r)->loaded);
    json_t *names = json_array();
    for (int i = 0, k = 0; names && i < r->n && k < loaded; i++) {
        if (r->names[i][0]) {
            json_array_append_new(names, json_string(r->names[i]));
            k++;
        }
    }
    return json_pack("{s:s, s:i, s:o}", "state", states[atomic_load(&((replica *)r)->state)],
                     "files", r->n, "loaded", names ? names : json_array());
}

/* Wipes a buffer that held a secret (a plain memset may be dropped). */
static void wipe(char *p, size_t n)
{
    volatile char *v = p;
    while (n--)
        *v++ = 0;
}

/* Registers the token of one line (text, without its newline), named
 * after the line; GT_EINVAL naming the line, never its text. */
static int token_line(store *db, const char *path, int lineno, char *text, gt_error *err)
{
    char *save = NULL;
    char *tok = strtok_r(text, " \t\r", &save);
    char *role = tok ? strtok_r(NULL, " \t\r", &save) : NULL;
    char *more = role ? strtok_r(NULL, " \t\r", &save) : NULL;
    if (!tok || tok[0] == '#')
        return GT_OK;
    if (more)
        return gt_error_set(err, GT_EINVAL, "token file %s line %d: more than TOKEN ROLE",
                            path, lineno);
    if (!auth_token_well_formed(tok))
        return gt_error_set(err, GT_EINVAL, "token file %s line %d: not a token (a token is"
                            " 'gt_' and %d more characters, as giant token create prints it)",
                            path, lineno, AUTH_TOKEN_LEN - 3);
    if (!role)
        role = "sampler";
    if (strcmp(role, "sampler") != 0 && strcmp(role, "reader") != 0)
        return gt_error_set(err, GT_EINVAL, "token file %s line %d: role '%.16s' is not sampler"
                            " or reader", path, lineno, role);
    char name[32];
    snprintf(name, sizeof name, "token-file-line-%d", lineno);
    gt_error e = {0};
    if (auth_token_register(db, tok, name, role, NULL, &e) != GT_OK)
        return gt_error_set(err, e.code ? e.code : GT_EINVAL, "token file %s line %d: %s",
                            path, lineno, e.message);
    return GT_OK;
}

int replica_token_file(store *db, const char *path, long long *n, gt_error *err)
{
    *n = 0;
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        int e = errno;
        if (f)
            fclose(f);
        return gt_error_set(err, GT_EIO, "token file %s: %s", path, strerror(e));
    }
    unsigned mode = (unsigned)st.st_mode & 0777;
    unsigned bad = st.st_uid == 0 && geteuid() != 0 ? 037u : 077u;
    if (!S_ISREG(st.st_mode) || (mode & bad)) {
        fclose(f);
        if (!S_ISREG(st.st_mode))
            return gt_error_set(err, GT_EINVAL, "token file %s is not a regular file", path);
        return gt_error_set(err, GT_EINVAL, "token file %s has mode 0%03o: it must not be"
                            " readable or writable by %s (chmod 600 %s)", path, mode,
                            bad == 077u ? "its group or others" : "others", path);
    }
    char line[512];
    int lineno = 0, rc = GT_OK;
    while (rc == GT_OK && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            rc = gt_error_set(err, GT_EINVAL, "token file %s line %d: too long", path, lineno);
            break;
        }
        if (len && line[len - 1] == '\n')
            line[--len] = '\0';
        char *p = line + strspn(line, " \t\r");
        int blank = !*p || *p == '#';
        rc = token_line(db, path, lineno, line, err);
        if (rc == GT_OK && !blank)
            (*n)++;
    }
    if (rc == GT_OK && ferror(f))
        rc = gt_error_set(err, GT_EIO, "token file %s: cannot read it", path);
    wipe(line, sizeof line);
    fclose(f);
    if (rc == GT_OK && *n == 0)
        rc = gt_error_set(err, GT_EINVAL, "token file %s holds no token", path);
    return rc;
}

void replica_free(replica *r)
{
    free(r);
}
