/* fuzz_sample_body: the whole body of a sample request
 * (POST /v1/runs/{id}/samples and /v1/models/{name}/samples), parsed and
 * checked by sample_body_parse as the route does, with the service's
 * default limits; the input's first byte picks a JSON or a binary reply
 * (their caps differ).  An accepted body must hold what the sampling
 * worker relies on: 1 <= n <= the cap, every energy finite and inside the
 * accepted range, row0 in [0, 2^40], steps 0 or 1 to 1000; a refused one a
 * 422 (or 500) with a message, and a field that names a key of the body. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_json.h"
#include "sample_body.h"

static void check(json_t *body, void *ctx)
{
    int json_reply = *(const int *)ctx;
    /* the defaults of server/base/settings.c: 100 MeV to 10^7 MeV, 10 000
     * showers, 100 as JSON */
    const sample_body_limits lim = {100.0, 1e7, 10000, 100, json_reply, 1000};
    sample_body b;
    sample_body_fault f;
    if (sample_body_parse(body, &lim, &b, &f)) {
        long cap = json_reply ? lim.max_json_showers : lim.max_showers;
        if (b.n < 1 || b.n > cap || !b.e_inc)
            abort();
        for (int64_t i = 0; i < b.n; i++)
            if (!isfinite(b.e_inc[i]) || !(b.e_inc[i] >= (float)lim.min_mev) ||
                !(b.e_inc[i] <= (float)lim.max_mev))
                abort();
        if (b.row0 < 0 || b.row0 > SAMPLE_BODY_MAX_ROW0 || b.steps < 0 || b.steps > 1000)
            abort();
        sample_body_free(&b);
    } else {
        if ((f.status != 422 && f.status != 500) || !f.message[0] || b.e_inc)
            abort();
        if (f.too_many && f.limit != lim.max_showers && f.limit != lim.max_json_showers)
            abort();
        /* the field is "", or names a key of the body (cut to the field's
         * size): the key itself, a member of it ("energy.min_mev") or an
         * element ("energies[3]") */
        if (f.field[0] && !fuzz_json_names_key(body, f.field, "[."))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int json_reply = data[0] & 1;
    return fuzz_json_run(data + 1, size - 1, check, &json_reply);
}
