/* The reference table of configs/README.md is the table of config fields
 * (engine/model/model_config_fields.c) rendered: this program renders it
 * and fails when the README's copy, between its two markers, differs.
 *
 *   test_model_config_doc            compare (GIANT_SOURCE_DIR/configs/README.md)
 *   test_model_config_doc --write F  write the rendered table into F
 *
 * So a field added, or a default changed, in the C table without the
 * README fails the tests; --write brings the README along. */
#include "check.h"
#include "gt_path.h"
#include "model_config.h"
#include "model_config_fields.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BEGIN "<!-- config fields: begin (rendered from engine/model/model_config_fields.c) -->\n"
#define END "<!-- config fields: end -->\n"

typedef struct text {
    char *s;
    size_t n, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->n + (size_t)need + 1 > t->cap) {
        t->cap = (t->n + (size_t)need + 1) * 2;
        t->s = realloc(t->s, t->cap);
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    t->n += (size_t)need;
}

static const char *type_word(const model_config_field *f)
{
    switch (f->type) {
    case MCF_SECTION: return "object";
    case MCF_BOOL: return "boolean";
    case MCF_INT:
    case MCF_INT64:
    case MCF_SEED:
    case MCF_VERSION: return "integer";
    case MCF_REAL: return "number";
    case MCF_ENERGY: return "object or string";
    default: return "string";
    }
}

/* x as %g without its exponent's sign and zeros (1e8, 1e-10), in out[32]. */
static const char *real_text(char out[32], double x)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%g", x);
    size_t o = 0;
    for (const char *p = buf; *p; p++) {
        out[o++] = *p;
        if (*p == 'e') {
            if (p[1] == '+')
                p++;
            else if (p[1] == '-')
                out[o++] = *++p;
            while (p[1] == '0')
                p++;
        }
    }
    out[o] = '\0';
    return out;
}

/* A literal as a config writes it: strings quoted. */
static void put_literal(text *t, const model_config_field *f, const char *lit)
{
    if (f->type == MCF_STRING || f->type == MCF_ENUM || f->type == MCF_NAME)
        put(t, "`\"%s\"`", lit);
    else
        put(t, "`%s`", lit);
}

static void put_allowed(text *t, const model_config_field *f)
{
    char lo[32], hi[32];
    int any = 1;
    switch (f->type) {
    case MCF_INT:
    case MCF_INT64:
    case MCF_SEED:
    case MCF_VERSION:
        snprintf(hi, sizeof hi, "%lld", (long long)f->ihi);
        put(t, "[%lld, %s]", (long long)f->ilo, f->ihi == INT64_MAX ? "2^63-1" : hi);
        break;
    case MCF_REAL:
        put(t, "%s%s, %s]", f->lo_open ? "(" : "[", real_text(lo, f->lo), real_text(hi, f->hi));
        break;
    case MCF_ENUM:
    case MCF_NAME:
        for (int i = 0; f->names[i]; i++)
            put(t, "%s`%s`", i ? ", " : "", f->names[i]);
        break;
    case MCF_STRING: put(t, "%zu bytes at most", f->size - 1); break;
    default: any = 0;
    }
    if (f->rule)
        put(t, "%s%s", any ? "; " : "", f->rule);
}

static void put_written(text *t, const model_config_field *f)
{
    if (f->type == MCF_SECTION && !f->when)
        return;
    if (f->flags & MCF_DEPRECATED)
        put(t, "never (read only)");
    else if (f->type == MCF_VERSION)
        put(t, "always, the current version");
    else if (f->type == MCF_ENERGY)
        put(t, "always, as an object");
    else if (f->when)
        put(t, "%s", f->when->doc);
    else if (f->flags & MCF_UNLESS_DEFAULT)
        put(t, "when not the default");
    else if (f->type != MCF_SECTION)
        put(t, "always");
}

/* The reference table, between its markers. */
static text render(void)
{
    text t = {0};
    put(&t, "%s", BEGIN);
    put(&t, "| field | type | allowed | default | left out of an older config | written back "
            "| what |\n|---|---|---|---|---|---|---|\n");
    for (int i = 1; i < model_config_field_count; i++) {
        const model_config_field *f = &model_config_fields[i];
        put(&t, "| `%s` | %s | ", f->path, type_word(f));
        put_allowed(&t, f);
        put(&t, " | ");
        if (f->def)
            put_literal(&t, f, f->def);
        put(&t, " | ");
        if (f->older) {
            put_literal(&t, f, f->older);
            put(&t, " before version %d", model_config_field_since(f));
            if (f->pinned_by)
                put(&t, " (migration %s)", f->pinned_by);
        }
        put(&t, " | ");
        put_written(&t, f);
        put(&t, " | %s |\n", f->doc);
    }
    put(&t, "%s", END);
    return t;
}

/* The file, NUL-terminated (free() it), or NULL. */
static char *slurp(const char *path, size_t *len)
{
    void *raw = NULL;
    gt_error err = {0};
    if (gt_path_read_all(path, &raw, len, &err) != GT_OK)
        return NULL;
    char *s = realloc(raw, *len + 1);
    if (!s) {
        free(raw);
        return NULL;
    }
    s[*len] = '\0';
    return s;
}

int main(int argc, char **argv)
{
    char path[1024];
    const char *src = getenv("GIANT_SOURCE_DIR");
    int write = argc == 3 && strcmp(argv[1], "--write") == 0;
    if (write)
        snprintf(path, sizeof path, "%s", argv[2]);
    else if (src)
        snprintf(path, sizeof path, "%s/configs/README.md", src);
    else
        check_skip("GIANT_SOURCE_DIR is not set");
    text t = render();
    /* no row may break the markdown table */
    for (int i = 0; i < model_config_field_count; i++) {
        const model_config_field *f = &model_config_fields[i];
        CHECK_MSG(!strchr(f->doc, '|') && (!f->rule || !strchr(f->rule, '|')), "%s", f->path);
    }
    size_t len = 0;
    char *doc = slurp(path, &len);
    CHECK_MSG(doc != NULL, "cannot read %s", path);
    char *b = doc ? strstr(doc, BEGIN) : NULL;
    char *e = b ? strstr(b, END) : NULL;
    CHECK_MSG(b && e, "%s has no markers %s ... %s", path, BEGIN, END);
    if (!b || !e) {
        free(doc);
        free(t.s);
        return check_finish();
    }
    e += strlen(END);
    if (write) {
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (f) {
            fwrite(doc, 1, (size_t)(b - doc), f);
            fwrite(t.s, 1, t.n, f);
            fwrite(e, 1, len - (size_t)(e - doc), f);
            fclose(f);
        }
    } else {
        int same = (size_t)(e - b) == t.n && memcmp(b, t.s, t.n) == 0;
        CHECK_MSG(same, "%s: the table of config fields differs from the one rendered from "
                        "engine/model/model_config_fields.c; rewrite it with "
                        "test_model_config_doc --write %s, rendered:\n%s",
                  path, path, t.s);
    }
    free(doc);
    free(t.s);
    return check_finish();
}
