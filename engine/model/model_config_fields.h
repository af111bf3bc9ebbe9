/* model_config_fields: the run config's fields, one row each.
 *
 * The table is what a config means: model_config.c takes from it the
 * defaults, the keys each section may hold, every type and range check, the
 * value a stored config of an older version meant by leaving a field out
 * (model_config_upgrade), and the canonical JSON it writes back; the
 * reference table in configs/README.md is rendered from it
 * (tests/model/test_model_config_doc.c checks that the two agree).
 *
 * Rows are in the order they are checked, so the first problem found in a
 * config is the same one whatever else is wrong with it.  A section's rows
 * are checked as: its keys, its own fields in row order, its `check` hook,
 * its sub-sections in row order, its `after` hook.
 *
 * Internal to giant_model (model_config.c and the tests of the table); the
 * rest of the engine and the service use model_config.h. */
#ifndef MODEL_CONFIG_FIELDS_H
#define MODEL_CONFIG_FIELDS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"

typedef enum mcf_type {
    MCF_SECTION,   /* an object; its keys are the next components of its rows */
    MCF_BOOL,      /* int 0/1                                             */
    MCF_INT,       /* int                                                 */
    MCF_INT64,     /* int64_t                                             */
    MCF_SEED,      /* uint64_t, written and read as an integer in [0, 2^63) */
    MCF_REAL,      /* double; an integer is a number too                  */
    MCF_STRING,    /* char[size]                                          */
    MCF_ENUM,      /* an int (or a C enum) holding an index into names    */
    MCF_NAME,      /* char[size] holding one of names                     */
    MCF_ENERGY,    /* dataset.synthetic.energy: the spec of model_energy.h
                    * (its rows follow it), or the deprecated dist name   */
    MCF_VERSION,   /* config_version: no member; written as the current one */
} mcf_type;

/* The hooks of a section (pre: before its keys are checked; check: after
 * its own fields; after: after its sub-sections).  `at` is the member the
 * section's row points to (the config itself for offset 0). */
typedef struct mcf_walk mcf_walk;
typedef int (*mcf_hook)(mcf_walk *w, const json_t *obj, const char *path, void *at,
                        model_config *cfg);

/* When a field (or a whole section) is written back. */
typedef struct mcf_when {
    int (*test)(const model_config *c);
    const char *doc;           /* "with `trunk.kind` `routed`" */
} mcf_when;

enum {
    MCF_UNLESS_DEFAULT = 1 << 0, /* written back only when not its default      */
    MCF_DEPRECATED = 1 << 1,     /* still read, never written                   */
    MCF_BY_PARENT = 1 << 2,      /* read by the row above it (MCF_ENERGY)       */
    MCF_SLURM_ONLY = 1 << 3,     /* named only with executor.kind "slurm"       */
};

typedef struct model_config_field {
    const char *path;          /* dotted: "model.stage2.rings"                */
    mcf_type type;
    size_t offset;             /* of its member in model_config               */
    size_t size;               /* MCF_STRING, MCF_NAME: the member's capacity */
    int64_t ilo, ihi;          /* integers: the range, both ends included     */
    double lo, hi;             /* MCF_REAL: the range, hi included            */
    int lo_open;               /* MCF_REAL: lo itself excluded                */
    const char *const *names;  /* MCF_ENUM, MCF_NAME: NULL-terminated         */
    const char *def;           /* the default as JSON text (strings bare);
                                * NULL: none (sections, deprecated rows)     */
    int since;                 /* the config_version from which leaving the
                                * field out means its default (0 reads as 1) */
    const char *older;         /* what leaving it out meant before `since`
                                * (NULL: the default then too)               */
    const char *pinned_by;     /* the migration that wrote `older` into the
                                * runs recorded before the field, if one did */
    unsigned flags;
    const mcf_when *when;      /* written back only when it holds (and, for
                                * a field, its sections' conditions hold)    */
    const char *what;          /* "must be <what>" for a wrong JSON type,
                                * where the type's own word says too little  */
    const char *rule;          /* the checks a hook makes, for the reference */
    mcf_hook pre, check, after; /* sections only */
    const char *doc;           /* one line for the reference table            */
} model_config_field;

extern const model_config_field model_config_fields[];
extern const int model_config_field_count;

/* The state of one walk over a config: where the first problem goes. */
struct mcf_walk {
    char *field;
    size_t field_len;
    gt_error *err;
};

/* Fails naming path (the dotted "train.lr"; "" for the document). */
int mcf_fail(mcf_walk *w, const char *path, const char *msg);

/* Fails naming key under path. */
int mcf_fail_key(mcf_walk *w, const char *path, const char *key, const char *msg);

/* *out = obj[key], or NULL when absent; a value of another JSON type than
 * `type` wants fails with "must be <what>" (the type's word when what is
 * NULL). */
int mcf_lookup(mcf_walk *w, const json_t *obj, const char *path, const char *key,
               mcf_type type, const char *what, const json_t **out);

/* The row of a dotted path, or NULL. */
const model_config_field *model_config_field_find(const char *path);

/* The field's value in c as JSON (new reference; NULL for a section). */
json_t *model_config_field_get(const model_config_field *f, const model_config *c);

/* The row's default (or older value when `older` is set) as JSON. */
json_t *model_config_field_literal(const model_config_field *f, const char *text);

/* The config version from which leaving f out means its default. */
static inline int model_config_field_since(const model_config_field *f)
{
    return f->since > 0 ? f->since : 1;
}

/* Names of the enumerations, indexed by the C enums of model_config.h. */
extern const char *const model_config_objectives[];
extern const char *const model_config_modes[];
extern const char *const model_config_trunks[];
extern const char *const model_config_skips[];
extern const char *const model_config_block_conds[];
extern const char *const model_config_solvers[];
extern const char *const model_config_precisions[];
extern const char *const model_config_energies[];
extern const char *const model_config_executors[];
extern const char *const model_config_simulators[];

#endif
