/* sample_body: the body of a sample request (POST /v1/runs/{id}/samples and
 * POST /v1/models/{name}/samples), checked and turned into what a sampling
 * job needs, with no HTTP in it: the route replies with what it says, and
 * the fuzz target (tests/fuzz/fuzz_sample_body.c) calls it as it is.
 *
 * A body is {"energies": [MeV, ...]} or {"count": N, "energy": SPEC} (the
 * energy spec of run configs and datasets, model_energy), with optional
 * "seed" (>= 0), "steps" (1 to 1000) and "row0" (0 to SAMPLE_BODY_MAX_ROW0:
 * the first shower is that row of the seed's sample).  Count requests have
 * their energies drawn here as `giant sample` draws them.  Depends on
 * body_check, Jansson and the engine's model_energy and synth. */
#ifndef SAMPLE_BODY_H
#define SAMPLE_BODY_H

#include <stdint.h>

#include <jansson.h>

#include "body_check.h"

/* Rows a request may start at: row0 + n stays far inside an int64 and the
 * engine's per-row counters. */
#define SAMPLE_BODY_MAX_ROW0 (1LL << 40)

typedef struct sample_body_limits {
    double min_mev, max_mev;   /* accepted incident energies               */
    long max_showers;          /* per request (--max-showers)              */
    long max_json_showers;     /* per request answered as JSON             */
    int json_reply;            /* the reply will be JSON                   */
    int max_steps;             /* solver steps a request may ask for
                                  (--max-sample-steps); 0: 1000              */
} sample_body_limits;

typedef struct sample_body {
    int64_t n;
    float *e_inc;              /* [n], malloc'ed: sample_body_free          */
    uint64_t seed;
    int64_t row0;
    int steps;                 /* 0: the model's sample.steps               */
} sample_body;

/* Why a body was refused: the status (422, or 500 when out of memory), the
 * field at fault ("" for the body as a whole; at most 47 bytes, as this
 * API has always cut it), the message, and for a request over a showers cap
 * (too_many = 1) the cap it went over.  The first three are a body_fault
 * (base, what body_check fills), also read by their own names. */
typedef struct sample_body_fault {
    union {
        body_fault base;
        struct {
            int status;
            char field[64];
            char message[256];
        };
    };
    int too_many;
    long limit;
} sample_body_fault;

/* 1 with out filled, or 0 with fault filled (out then holds nothing to
 * free).  body may be anything JSON (or NULL). */
int sample_body_parse(const json_t *body, const sample_body_limits *lim, sample_body *out,
                      sample_body_fault *fault);
void sample_body_free(sample_body *b);

#endif
