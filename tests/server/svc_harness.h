/* svc_harness: the service as a child process for integration tests.
 *
 * Starts `giant serve` on 127.0.0.1:0 with a given database and data
 * directory, collects its log (stderr) on a thread and reads the bound port
 * from the "listening" line; stops it with a signal.  Plus small helpers
 * over the C client (api/client) that the service tests share. */
#ifndef SVC_HARNESS_H
#define SVC_HARNESS_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "giant_client.h"

typedef struct svc {
    pid_t pid;
    int fd;
    pthread_t reader;
    pthread_mutex_t mu;
    char *log;
    size_t len, cap;
    int port;
    char url[64];
} svc;

/* extra: NULL-terminated flags appended to the command line. */
int svc_start(svc *s, const char *db, const char *data_dir, const char *const *extra);
/* The process layer under svc_start, for tests that run other commands:
 * starts argv (NULL-terminated; argv[0] the program's path) with its stdout
 * and stderr collected as the log; 0, or -1 when it cannot. */
int svc_spawn(svc *s, char *const argv[]);
/* Waits up to ms for the "listening" line of a started server; 1 with port
 * and url set from it, 0 when it did not come. */
int svc_await_listening(svc *s, long ms);
/* svc_spawn of a server's command line (argv[0] giant or giant_test_server),
 * then svc_await_listening (60 s): 0 with port and url set, else -1 with
 * the process killed and its log kept.  svc_start is this with giant's. */
int svc_launch(svc *s, char *const argv[]);
int svc_log_has(svc *s, const char *needle);
int svc_log_wait(svc *s, const char *needle, long ms);
/* Waits up to ms for the process to exit; returns the exit status, -1 when
 * killed by a signal or after a timeout (then SIGKILLed). */
int svc_wait_exit(svc *s, long ms);
/* Sends sig, then as svc_wait_exit. */
int svc_stop(svc *s, int sig, long ms);
/* Runs a shell command made from fmt (the client subcommands, curl): its
 * exit status, -1 when it did not exit normally. */
int svc_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void svc_free(svc *s);
/* Prints the log to stderr (on failure). */
void svc_dump(svc *s);

void svc_sleep_ms(long ms);

/* The giant binary: GIANT_BINARY_DIR/giant. */
const char *svc_binary(void);

/* Requests over a client; *j the parsed body (or NULL), returns the status
 * (0 on transport failure). */
long svc_json(gc_client *c, const char *method, const char *path, const char *body,
              const char *const *headers, json_t **j);

/* Polls GET /v1/runs/{id} until its status is want (or any final status
 * when want is NULL); returns the last run object (new reference). */
json_t *svc_wait_run(gc_client *c, long long id, const char *want, long ms);

/* POST /v1/datasets with body, then polls the dataset up to ms until it is
 * no longer pending: its id when it is ready, else 0. */
long long svc_dataset_ready(gc_client *c, const char *body, long ms);

/* A tiny run config (dataset_1_photons, hidden 32): steps per stage, with
 * the dataset given as extra JSON members (e.g. "\"dataset_id\": 1") or
 * NULL for 300 synthetic showers. Returns malloc'ed text. */
char *svc_tiny_config(const char *name, int steps, int log_every, int ckpt_every,
                      const char *dataset_members);

/* text (freed) with a small model.accept added: showers training showers,
 * a classifier of hidden units and one layer, epochs, cap_quantile (0:
 * the default).  Returns malloc'ed text. */
char *svc_with_accept(char *text, int showers, int hidden, int epochs, double cap_quantile);

/* The Prometheus text format (0.0.4) of a /metrics reply: every family has
 * # HELP then # TYPE before its samples and is declared once, each sample
 * belongs to its family and has a number, histograms' buckets are
 * cumulative in rising le and end at le="+Inf", which _count equals.
 * 1 when it holds; else 0 with the first fault in why. */
int svc_prometheus_check(const char *text, char *why, size_t cap);
/* The OpenMetrics text format (1.0.0) of a /metrics reply asked for with
 * Accept: application/openmetrics-text: it ends with "# EOF" and nothing
 * after; a counter family is named without _total and its samples with it;
 * no HELP text holds an unescaped double quote; and, read back into the
 * classic format (the suffix put back, the quotes and the EOF taken out),
 * it passes svc_prometheus_check.  1 when it holds; else 0 with why. */
int svc_openmetrics_check(const char *text, char *why, size_t cap);
/* The value of the sample line that starts with series (name and labels
 * exactly as written), or -1 when there is none. */
double svc_metric(const char *text, const char *series);

/* Members of a reply: a string (or NULL), an integer (or 0). */
const char *svc_str(json_t *o, const char *key);
long long svc_num(json_t *o, const char *key);
/* The code and the field of an error reply ({"error": {...}}), or NULL. */
const char *svc_ecode(json_t *j);
const char *svc_efield(json_t *j);

/* Polls GET /v1/datasets/{id} every 50 ms, for up to ms, until its status
 * is no longer "pending"; the last reply (new reference, or NULL). */
json_t *svc_wait_dataset(gc_client *c, long long id, long ms);

/* A loopback TCP port nobody listens on now (the kernel's pick, released
 * at once), or 0. */
int svc_free_port(void);

/* Removes dir and all under it (a test's folder, kept when a check failed,
 * for a look); says so on stderr when it cannot. */
void svc_remove_tree(const char *dir);

#endif
