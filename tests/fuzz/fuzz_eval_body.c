/* fuzz_eval_body: the body of an evaluation request (POST
 * /v1/runs/{id}/evaluations), checked and normalised by eval_body_normalise
 * as the route does, with the service's default --max-showers.  An
 * accepted body must come back with what the evaluations worker relies on:
 * dataset ids >= 1 and different, n in [20, the cap], a seed >= 0, 1 to 4
 * known metrics, each once, in the documented order, and the classifier's
 * sizes in range; a refused one a 422 with a message and a field that
 * names a key of the body, "dataset_id" when it is missing, or "" for the
 * body itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eval_body.h"
#include "fuzz_json.h"

static long long integer(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

static void check(json_t *body, void *ctx)
{
    (void)ctx;
    const long max_showers = 10000;   /* server/base/settings.c's default */
    eval_body_fault f;
    json_t *n = eval_body_normalise(body, max_showers, &f);
    if (n) {
        long long ds = integer(n, "dataset_id"), cnt = integer(n, "n");
        json_t *r2 = json_object_get(n, "ref2_dataset_id");
        if (ds < 1 || cnt < EVAL_BODY_MIN_SHOWERS || cnt > max_showers || integer(n, "seed") < 0)
            abort();
        if (!json_is_null(r2) && (!json_is_integer(r2) || json_integer_value(r2) < 1 ||
                                  json_integer_value(r2) == ds))
            abort();
        json_t *m = json_object_get(n, "metrics");
        size_t nm = json_array_size(m), k = 0, i;
        if (nm < 1 || nm > EVAL_BODY_N_METRICS)
            abort();
        json_t *v;
        json_array_foreach(m, i, v) {   /* a strictly increasing walk of the known list */
            while (k < EVAL_BODY_N_METRICS &&
                   strcmp(json_string_value(v) ? json_string_value(v) : "", eval_body_metrics[k]))
                k++;
            if (k++ >= EVAL_BODY_N_METRICS)
                abort();
        }
        json_t *c = json_object_get(n, "classifier");
        long long h = integer(c, "hidden"), d = integer(c, "depth"), e = integer(c, "epochs");
        if (h < 1 || h > 4096 || d < 1 || d > 8 || e < 1 || e > 500)
            abort();
        json_decref(n);
    } else {
        if (f.status != 422 || !f.message[0])
            abort();
        /* the field is "", or names a key of the body (cut to the field's
         * size): the key itself, a member ("classifier.depth") or an element
         * ("metrics[2]") */
        if (f.field[0]) {
            int found = fuzz_json_names_key(body, f.field, "[.");
            /* or the one required key, when it is missing */
            found |= !strcmp(f.field, "dataset_id") && !json_object_get(body, "dataset_id");
            if (!found)
                abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_json_run(data, size, check, NULL);
}
