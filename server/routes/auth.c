/* auth: the start-up rule and the guard of every request (auth.h). */
#include "auth.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gt_clock.h"
#include "gt_sha256.h"
#include "log.h"
#include "slurm_jobs.h"

/* ---------------------------------------------------------------------------
 * Start-up policy
 * ------------------------------------------------------------------------- */

int auth_host_is_loopback(const char *host)
{
    if (!host)
        return 0;
    if (strcasecmp(host, "localhost") == 0)
        return 1;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return 0;
}

int auth_listen_allowed(const char *host, long long usable_tokens, const char *db, char *why,
                        size_t cap)
{
    if (cap)
        why[0] = '\0';
    if (auth_host_is_loopback(host) || usable_tokens > 0)
        return 1;
    snprintf(why, cap,
             "listening on '%s', which is not a loopback address, needs a token, and the"
             " database %s has none usable: create one with `giant token create --name NAME"
             " --role admin --db %s` (it prints the token once), then start again",
             host, db ? db : "", db ? db : "FILE");
    return 0;
}

/* ---------------------------------------------------------------------------
 * The guard
 * ------------------------------------------------------------------------- */

/* Per-token state: the token bucket and when last_used_at was written. */
typedef struct guard_slot {
    int64_t id;
    double tokens;             /* requests the bucket holds now               */
    double refilled;           /* when tokens was computed (seconds)          */
    double touched;            /* when last_used_at was written, -1 = never   */
} guard_slot;

#define GUARD_MAX_SLOTS 4096
#define TOUCH_EVERY_S 60.0

struct auth_guard {
    store *db;
    auth_config cfg;
    pthread_mutex_t mu;
    guard_slot *slots;
    int n, cap;
};

int auth_guard_new(auth_guard **out, store *db, const auth_config *cfg, gt_error *err)
{
    *out = NULL;
    auth_guard *g = calloc(1, sizeof *g);
    if (!g)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    g->db = db;
    g->cfg = *cfg;
    if (g->cfg.burst < 1)
        g->cfg.burst = 1;
    pthread_mutex_init(&g->mu, NULL);
    *out = g;
    return GT_OK;
}

void auth_guard_free(auth_guard *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->mu);
    free(g->slots);
    free(g);
}

/* The slot of id (mu held), made when missing; a full table drops the
 * slot refilled longest ago (its token starts again with a full bucket). */
static guard_slot *slot_of(auth_guard *g, int64_t id, double now)
{
    for (int i = 0; i < g->n; i++)
        if (g->slots[i].id == id)
            return &g->slots[i];
    if (g->n == g->cap) {
        if (g->cap == GUARD_MAX_SLOTS) {
            int oldest = 0;
            for (int i = 1; i < g->n; i++)
                if (g->slots[i].refilled < g->slots[oldest].refilled)
                    oldest = i;
            g->slots[oldest] = g->slots[--g->n];
        } else {
            int cap = g->cap ? 2 * g->cap : 16;
            guard_slot *grown = realloc(g->slots, sizeof *grown * (size_t)cap);
            if (!grown)
                return NULL;
            g->slots = grown;
            g->cap = cap;
        }
    }
    guard_slot *s = &g->slots[g->n++];
    *s = (guard_slot){ id, (double)g->cfg.burst, now, -1.0 };
    return s;
}

int auth_guard_take(auth_guard *g, int64_t id, double now)
{
    if (g->cfg.rate_per_min <= 0)
        return 0;
    double rate = g->cfg.rate_per_min / 60.0;     /* per second */
    int wait = 0;
    pthread_mutex_lock(&g->mu);
    guard_slot *s = slot_of(g, id, now);
    if (s) {
        double t = s->tokens + (now - s->refilled) * rate;
        s->tokens = t > g->cfg.burst ? (double)g->cfg.burst : t;
        s->refilled = now;
        if (s->tokens >= 1.0)
            s->tokens -= 1.0;
        else
            wait = (int)ceil((1.0 - s->tokens) / rate);
    }
    pthread_mutex_unlock(&g->mu);
    return wait < 0 ? 0 : wait;
}

/* Writes last_used_at when it was not written for a minute by this
 * process: one write per token per minute, not one per request. */
static void touch(auth_guard *g, int64_t id)
{
    double now = gt_clock_s();
    int due = 0;
    pthread_mutex_lock(&g->mu);
    guard_slot *s = slot_of(g, id, now);
    if (s && (s->touched < 0 || now - s->touched >= TOUCH_EVERY_S)) {
        s->touched = now;
        due = 1;
    }
    pthread_mutex_unlock(&g->mu);
    gt_error err = { 0 };
    if (due && auth_token_touch(g->db, id, &err) != GT_OK)
        log_msg(LOG_WARN, "auth", "token_id=%lld error=\"%s\"", (long long)id, err.message);
}

static int reply_401(http_request *req, int bad_token, const char *msg)
{
    /* RFC 6750: a missing token gets the bare challenge, a bad one
     * error="invalid_token". */
    const char *const headers[] = {
        "WWW-Authenticate",
        bad_token ? "Bearer realm=\"giant\", error=\"invalid_token\"" : "Bearer realm=\"giant\"",
        NULL
    };
    http_reply_error_headers(req, 401, HTTP_E_UNAUTHORIZED, headers, "%s", msg);
    return 0;
}

/* The token of "Bearer <token>" (scheme case-insensitive), or NULL. */
static const char *bearer(const char *h)
{
    while (*h == ' ')
        h++;
    if (strncasecmp(h, "Bearer", 6) != 0 || h[6] != ' ')
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return *h ? h : NULL;
}

/* A Slurm job's token (AUTH_JOB_BIT): "gtj_" and 64 hex digits, found by
 * its hash (the secret has 256 bits: the lookup's timing tells nothing
 * usable), valid for the run of the path's {id} only. */
static int job_token_check(auth_guard *g, http_request *req)
{
    const char *h = http_header(req, "Authorization");
    char msg[256];
    if (!h) {
        snprintf(msg, sizeof msg, "%s %s needs the ingest token of the run's Slurm job: send"
                 " 'Authorization: Bearer gtj_...'", http_method(req), http_path(req));
        return reply_401(req, 0, msg);
    }
    const char *token = bearer(h);
    int ok = token && strlen(token) == 68 && strncmp(token, "gtj_", 4) == 0;
    for (int i = 4; ok && i < 68; i++)
        ok = isxdigit((unsigned char)token[i]) != 0;
    if (!ok)
        return reply_401(req, 1, "the ingest token must be 'Bearer gtj_' and 64 hex digits");
    char hash[65];
    gt_sha256_hex(token, strlen(token), hash);
    int64_t run = 0;
    gt_error err = {0};
    int rc = slurm_jobs_run_of_token(g->db, hash, &run, &err);
    if (rc == GT_ENOTFOUND)
        return reply_401(req, 1, "no Slurm job of this service holds this token (the run may"
                                 " have been submitted again since)");
    if (rc) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err.message);
        return 0;
    }
    const char *id = http_param(req, "id");
    char want[32];
    snprintf(want, sizeof want, "%lld", (long long)run);
    if (!id || strcmp(id, want) != 0) {
        http_reply_error(req, 403, HTTP_E_FORBIDDEN, NULL,
                         "this token belongs to the Slurm job of run %lld and writes to that run"
                         " only", (long long)run);
        return 0;
    }
    http_set_principal(req, 0, 0);
    return 1;
}

int auth_http_check(http_request *req, unsigned access, void *ctx)
{
    auth_guard *g = ctx;
    if (access & AUTH_OPEN_BIT)
        return 1;
    if (access & AUTH_JOB_BIT)
        return job_token_check(g, req);
    if ((access & AUTH_SCRAPE_BIT) && g->cfg.public_metrics)
        return 1;
    unsigned allowed = (access & AUTH_ALL_ROLES) | AUTH_ADMIN;
    if (access & AUTH_SCRAPE_BIT)
        allowed = AUTH_ALL_ROLES;
    const char *h = http_header(req, "Authorization");
    char msg[512];
    if (!h) {
        if (!g->cfg.require_tokens && http_client_loopback(req)) {
            http_set_principal(req, 0, AUTH_ALL_ROLES);
            return 1;
        }
        snprintf(msg, sizeof msg, "%s %s needs a token: send 'Authorization: Bearer <token>'",
                 http_method(req), http_path(req));
        return reply_401(req, 0, msg);
    }
    const char *token = bearer(h);
    if (!token)
        return reply_401(req, 1, "the Authorization header must be 'Bearer <token>'");
    auth_verdict v;
    auth_identity who;
    gt_error err = { 0 };
    if (auth_token_verify(g->db, token, &v, &who, &err) != GT_OK) {
        http_reply_error(req, 500, HTTP_E_INTERNAL, NULL, "%s", err.message);
        return 0;
    }
    if (v != AUTH_VALID) {
        if (v == AUTH_REVOKED)
            snprintf(msg, sizeof msg, "token '%s' was revoked", who.name);
        else if (v == AUTH_EXPIRED)
            snprintf(msg, sizeof msg, "token '%s' expired at %s", who.name, who.expires_at);
        else
            snprintf(msg, sizeof msg, "the token is not one of this service's");
        return reply_401(req, 1, msg);
    }
    if (!(who.role & allowed)) {
        char roles[64];
        auth_role_list(allowed, roles, sizeof roles);
        http_reply_error(req, 403, HTTP_E_FORBIDDEN, NULL,
                         "token '%s' has role %s; %s %s needs one of: %s", who.name,
                         auth_role_name(who.role), http_method(req), http_path(req), roles);
        return 0;
    }
    int wait = auth_guard_take(g, who.id, gt_clock_s());
    if (wait > 0) {
        http_reply_error_retry(req, 429, HTTP_E_RATE_LIMITED, wait,
                               "token '%s' is over %ld requests a minute (burst %ld): retry in"
                               " %d s", who.name, g->cfg.rate_per_min, g->cfg.burst, wait);
        return 0;
    }
    touch(g, who.id);
    http_set_principal(req, who.id, who.role);
    return 1;
}
