/* eval_body: the body of POST /v1/runs/{id}/evaluations, checked and given
 * its defaults apart from the HTTP layer (the route replies with the
 * fault), so that a fuzzer reaches every path of it (fuzz_eval_body).
 * The datasets it names are checked by the route, against the database. */
#ifndef GIANT_EVAL_BODY_H
#define GIANT_EVAL_BODY_H

#include <jansson.h>

#include "body_check.h"

/* The fewest showers an evaluation compares: the classifier needs 10 rows
 * a split. */
#define EVAL_BODY_MIN_SHOWERS 20

/* The metrics, in the order a request's are written back. */
#define EVAL_BODY_N_METRICS 7
extern const char *const eval_body_metrics[EVAL_BODY_N_METRICS];
#define EVAL_BODY_METRIC_LIST                                                                   \
    "separation_power, fpd_kpd, classifier_high, classifier_low, classifier_trees_high, "     \
    "classifier_trees_low, classifier_breakdown"

/* status 422, or 500 when out of memory; field the body's key at fault
 * ("" = the body); message. */
typedef body_fault eval_body_fault;

/* The request with every default filled, a new reference: dataset_id,
 * ref2_dataset_id (an id or null), n (default min(max_showers, 2000), at
 * least EVAL_BODY_MIN_SHOWERS and at most max_showers), seed, metrics
 * (each once, in eval_body_metrics' order), classifier {hidden, depth,
 * epochs}.  NULL with fault filled when the body is refused.  body may be
 * any JSON value, or NULL. */
json_t *eval_body_normalise(const json_t *body, long max_showers, eval_body_fault *fault);

#endif
