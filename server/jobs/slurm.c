#include "slurm.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "gt_sha256.h"
#include "log.h"
#include "runs.h"
#include "slurm_jobs.h"
#include "subproc.h"
#include "store.h"
#include "worker_thread.h"

/* A Slurm command that takes longer than this is killed and tried again at
 * the next poll (slurmctld down or overloaded): the thread never hangs. */
#define SLURM_CMD_TIMEOUT_MS 30000
#define SLURM_MAX_OPTIONS 32

struct slurm {
    store *db;
    slurm_config cfg;
    worker_thread w;
};

/* ---------------------------------------------------------------------------
 * Programs, options, tokens
 * ------------------------------------------------------------------------- */

static void program(const slurm_config *cfg, const char *name, char *out, size_t cap)
{
    if (cfg->bin_dir[0])
        snprintf(out, cap, "%s/%s", cfg->bin_dir, name);
    else
        snprintf(out, cap, "%s", name);
}

/* Whether name is an executable file in bin_dir, or in a PATH entry. */
static int findable(const slurm_config *cfg, const char *name)
{
    char p[2048];
    if (cfg->bin_dir[0]) {
        program(cfg, name, p, sizeof p);
        return access(p, X_OK) == 0;
    }
    return subproc_which(name, p, sizeof p) == 0;
}

int slurm_available(const slurm_config *cfg, char *why, size_t cap)
{
    static const char *const need[] = {"sbatch", "squeue", "scancel"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!findable(cfg, need[i])) {
            snprintf(why, cap, "%s not found in %s", need[i],
                     cfg->bin_dir[0] ? cfg->bin_dir : "PATH (set --slurm-bin)");
            return 0;
        }
    why[0] = '\0';
    return 1;
}

/* Splits the operator's options on whitespace into argv elements (no
 * quoting: each is one "--name[=value]" word). */
static int split_options(const char *options, char words[][256], int max, gt_error *err)
{
    int n = 0;
    const char *p = options;
    while (*p) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        const char *start = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        size_t len = (size_t)(p - start);
        if (n == max || len >= 256)
            return gt_error_set(err, GT_EINVAL,
                                "slurm-options: at most %d options of 255 characters", max);
        memcpy(words[n], start, len);
        words[n][len] = '\0';
        const char *w = words[n];
        int ok = strncmp(w, "--", 2) == 0 && (isalnum((unsigned char)w[2]));
        for (const char *q = w + 2; ok && *q && *q != '='; q++)
            ok = isalnum((unsigned char)*q) || *q == '-' || *q == '_';
        for (const char *q = strchr(w, '='); ok && q && *q; q++)
            ok = (unsigned char)*q > 32 && *q != '\'' && *q != '"' && *q != '\\';
        if (!ok)
            return gt_error_set(err, GT_EINVAL,
                                "slurm-options: '%s' is not --name or --name=value", w);
        n++;
    }
    return n;
}

int slurm_options_check(const char *options, gt_error *err)
{
    char words[SLURM_MAX_OPTIONS][256];
    int n = split_options(options, words, SLURM_MAX_OPTIONS, err);
    return n < 0 ? GT_EINVAL : GT_OK;
}

void slurm_token_new(char token[SLURM_TOKEN_LEN + 1], char hash[65])
{
    unsigned char secret[32];
    if (RAND_bytes(secret, sizeof secret) != 1) {
        /* never a guessable token: without randomness the job is refused */
        token[0] = hash[0] = '\0';
        return;
    }
    memcpy(token, "gtj_", 4);
    for (size_t i = 0; i < sizeof secret; i++)
        snprintf(token + 4 + 2 * i, 3, "%02x", secret[i]);
    gt_sha256_hex(token, strlen(token), hash);
}

/* ---------------------------------------------------------------------------
 * Submitting a run
 * ------------------------------------------------------------------------- */

/* s in single quotes for sh, every ' written as '\''. */
static int sh_quote(char *out, size_t cap, const char *s)
{
    size_t k = 0;
    if (k + 1 >= cap)
        return -1;
    out[k++] = '\'';
    for (; *s; s++) {
        if (*s == '\'') {
            if (k + 4 >= cap)
                return -1;
            memcpy(out + k, "'\\''", 4);
            k += 4;
        } else {
            if (k + 1 >= cap)
                return -1;
            out[k++] = *s;
        }
    }
    if (k + 2 > cap)
        return -1;
    out[k++] = '\'';
    out[k] = '\0';
    return 0;
}

/* Writes the job script for run (0600: it holds the token). */
static int write_script(const slurm_config *cfg, int64_t run, const char *token,
                        const char *parallel, const char *path, gt_error *err)
{
    char giant[2100], url[1100], data[2100], tok[80];
    if (sh_quote(giant, sizeof giant, cfg->giant) || sh_quote(url, sizeof url, cfg->report_url) ||
        sh_quote(data, sizeof data, cfg->node_data_dir) || sh_quote(tok, sizeof tok, token))
        return gt_error_set(err, GT_EINVAL, "a Slurm setting is too long for the job script");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return gt_error_set(err, GT_EIO, "cannot write %s: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        return gt_error_set(err, GT_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    /* The token goes through the environment, not argv: a node's other
     * users see a process's argv in ps, not its environment.  OpenMP's
     * wait policy is left to the node (and to what sbatch exports): the
     * job owns its cores, and PASSIVE, which the script used to default
     * to, made `giant train` 34 % slower on 2 cores (deploy/README.md). */
    fprintf(f,
            "#!/bin/sh\n"
            "# giant run %lld, written by the giant service: trains the run on this node\n"
            "# and reports it back.  GIANT_REPORT_TOKEN lets this job write to run %lld\n"
            "# only, until the run is submitted again.\n"
            "GIANT_REPORT_TOKEN=%s\n"
            "export GIANT_REPORT_TOKEN\n"
            "exec %s train --report %s --run %lld --data-dir %s%s\n",
            (long long)run, (long long)run, tok, giant, url, (long long)run, data, parallel);
    if (fflush(f) != 0 || fclose(f) != 0)
        return gt_error_set(err, GT_EIO, "cannot write %s: %s", path, strerror(errno));
    return GT_OK;
}

/* The first line of a command's stderr (or stdout), for a run's error. */
static void first_line(const subproc_result *r, char *out, size_t cap)
{
    const char *t = r->err && r->err[0] ? r->err : r->out ? r->out : "";
    size_t n = strcspn(t, "\n");
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), t);
}

static void fail_run(store *db, int64_t run, const char *why)
{
    int changed = 0;
    gt_error err = {0};
    if (runs_transition(db, run, "queued", "failed", why, NULL, &changed, &err))
        log_msg(LOG_ERROR, "slurm", "run=%lld error=\"%s\"", (long long)run, err.message);
    log_msg(LOG_WARN, "slurm", "run=%lld status=failed error=\"%s\"", (long long)run, why);
}

static void submit(slurm *s, int64_t run)
{
    const slurm_config *cfg = &s->cfg;
    gt_error err = {0};
    model_config run_cfg;
    if (runs_read_config(s->db, run, &run_cfg, &err)) {
        fail_run(s->db, run, err.message);
        return;
    }
    const model_executor *ex = &run_cfg.executor;
    const char *partition = ex->partition[0] ? ex->partition : cfg->partition;
    const char *gres = ex->gres[0] ? ex->gres : cfg->gres;
    long long minutes = ex->time_limit_min > 0 ? ex->time_limit_min : cfg->time_limit_min;
    int requeue = ex->requeue;
    /* data parallel on the node: the trainer launches its ranks itself */
    char parallel[32] = "";
    if (ex->gpus > 1)
        snprintf(parallel, sizeof parallel, " --gpus %d", ex->gpus);
    else if (ex->ranks > 1)
        snprintf(parallel, sizeof parallel, " --ranks %d", ex->ranks);

    char token[SLURM_TOKEN_LEN + 1], hash[65];
    slurm_token_new(token, hash);
    if (!token[0]) {
        log_msg(LOG_ERROR, "slurm", "run=%lld error=\"no randomness for a token\"",
                (long long)run);
        return;                 /* tried again at the next poll */
    }
    char script[1200], output[1200];
    snprintf(script, sizeof script, "%s/run-%lld.sh", cfg->job_dir, (long long)run);
    snprintf(output, sizeof output, "--output=%s/run-%lld-%%j.out", cfg->job_dir,
             (long long)run);
    if (mkdir(cfg->job_dir, 0700) != 0 && errno != EEXIST) {
        char why[1400];
        snprintf(why, sizeof why, "cannot create the Slurm job directory %s: %s", cfg->job_dir,
                 strerror(errno));
        fail_run(s->db, run, why);
        return;
    }
    if (write_script(cfg, run, token, parallel, script, &err)) {
        fail_run(s->db, run, err.message);
        return;
    }

    char sbatch[1100], name[64], part[128], gr[160], tl[48];
    char words[SLURM_MAX_OPTIONS][256];
    program(cfg, "sbatch", sbatch, sizeof sbatch);
    snprintf(name, sizeof name, "--job-name=giant-run-%lld", (long long)run);
    char *argv[16 + SLURM_MAX_OPTIONS];
    int n = 0;
    argv[n++] = sbatch;
    argv[n++] = "--parsable";
    argv[n++] = name;
    argv[n++] = output;
    argv[n++] = requeue ? "--requeue" : "--no-requeue";
    if (partition[0]) {
        snprintf(part, sizeof part, "--partition=%s", partition);
        argv[n++] = part;
    }
    if (gres[0]) {
        snprintf(gr, sizeof gr, "--gres=%s", gres);
        argv[n++] = gr;
    }
    if (minutes > 0) {
        snprintf(tl, sizeof tl, "--time=%lld", minutes);
        argv[n++] = tl;
    }
    int nopt = split_options(cfg->options, words, SLURM_MAX_OPTIONS, &err);
    for (int i = 0; i < nopt; i++)
        argv[n++] = words[i];
    argv[n++] = script;
    argv[n] = NULL;

    subproc_result r;
    int started = subproc_run(argv, SLURM_CMD_TIMEOUT_MS, &r) == 0;
    char line[400];
    first_line(&r, line, sizeof line);
    if (!started || r.timed_out) {
        /* sbatch could not be run or hung: the cluster, not the run, is at
         * fault; the next poll tries again */
        log_msg(LOG_WARN, "slurm", "run=%lld sbatch=\"%s\"%s", (long long)run, line,
                r.timed_out ? " timed_out=1" : "");
        subproc_result_free(&r);
        return;
    }
    char *end = NULL;
    long long job = strtoll(r.out, &end, 10);
    if (r.exit_code != 0 || job <= 0 || !end || (*end && *end != ';' && *end != '\n')) {
        char why[600];
        snprintf(why, sizeof why, "sbatch refused the job (exit %d): %s", r.exit_code, line);
        subproc_result_free(&r);
        unlink(script);
        fail_run(s->db, run, why);
        return;
    }
    subproc_result_free(&r);
    if (slurm_jobs_submitted(s->db, run, job, hash, &err)) {
        /* The job runs but its token is unknown: cancel it rather than
         * leave a job no one follows. */
        log_msg(LOG_ERROR, "slurm", "run=%lld job=%lld error=\"%s\"", (long long)run, job,
                err.message);
        char scancel[1100], id[32];
        program(cfg, "scancel", scancel, sizeof scancel);
        snprintf(id, sizeof id, "%lld", job);
        char *cargv[] = {scancel, id, NULL};
        if (subproc_run(cargv, SLURM_CMD_TIMEOUT_MS, &r) == 0)
            subproc_result_free(&r);
        return;
    }
    char data[160];
    snprintf(data, sizeof data, "{\"job_id\":%lld,\"state\":\"PENDING\",\"reason\":null}", job);
    runs_append_event(s->db, run, "slurm", data, NULL);
    log_msg(LOG_INFO, "slurm", "run=%lld job=%lld submitted=1 partition=\"%s\"", (long long)run,
            job, partition);
}

/* ---------------------------------------------------------------------------
 * Following the jobs
 * ------------------------------------------------------------------------- */

typedef enum { JOB_WAITING, JOB_RUNNING, JOB_DONE } job_phase;

/* Slurm's job states (squeue %T) by what they mean for the run. */
static job_phase phase_of(const char *state)
{
    static const char *const waiting[] = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                                          "SUSPENDED", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT",
                                          NULL};
    static const char *const running[] = {"RUNNING", "CONFIGURING", "COMPLETING", "SIGNALING",
                                          "STAGE_OUT", "RESIZING", NULL};
    for (const char *const *p = waiting; *p; p++)
        if (strcmp(state, *p) == 0)
            return JOB_WAITING;
    for (const char *const *p = running; *p; p++)
        if (strcmp(state, *p) == 0)
            return JOB_RUNNING;
    return JOB_DONE;
}

typedef struct seen_job {
    long long id;
    char state[32];
    char reason[128];
    char node[128];
} seen_job;

/* One squeue call for every active job: "ID|STATE|REASON|NODES" lines.
 * Returns the number parsed, or -1 when squeue failed (nothing is decided
 * then).  A job squeue no longer knows is simply absent. */
static int squeue_all(slurm *s, json_t *rows, seen_job *out, int max)
{
    char list[16384] = "";
    size_t k = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        int w = snprintf(list + k, sizeof list - k, "%s%lld", k ? "," : "",
                         (long long)json_integer_value(json_object_get(row, "job_id")));
        if (w < 0 || (size_t)w >= sizeof list - k)
            break;
        k += (size_t)w;
    }
    char squeue[1100], jobs[16400];
    program(&s->cfg, "squeue", squeue, sizeof squeue);
    snprintf(jobs, sizeof jobs, "--jobs=%s", list);
    char *argv[] = {squeue, "--noheader", "--states=all", "--format=%i|%T|%r|%N", jobs, NULL};
    subproc_result r;
    if (subproc_run(argv, SLURM_CMD_TIMEOUT_MS, &r) != 0 || r.timed_out) {
        log_msg(LOG_WARN, "slurm", "squeue=\"%s\"", r.timed_out ? "timed out" : r.err);
        subproc_result_free(&r);
        return -1;
    }
    if (r.exit_code != 0) {
        /* One job that Slurm forgot, asked for alone, is an error; several
         * jobs of which some are forgotten are not. */
        int forgotten = strstr(r.err, "Invalid job id") != NULL;
        if (!forgotten)
            log_msg(LOG_WARN, "slurm", "squeue_exit=%d error=\"%.200s\"", r.exit_code, r.err);
        subproc_result_free(&r);
        return forgotten ? 0 : -1;
    }
    int n = 0;
    char *save = NULL;
    for (char *line = strtok_r(r.out, "\n", &save); line && n < max;
         line = strtok_r(NULL, "\n", &save)) {
        seen_job *j = &out[n];
        memset(j, 0, sizeof *j);
        char *f[4] = {0};
        int nf = 0;
        for (char *p = line; nf < 4; nf++) {
            f[nf] = p;
            char *bar = strchr(p, '|');
            if (!bar) {
                nf++;
                break;
            }
            *bar = '\0';
            p = bar + 1;
        }
        if (nf < 2)
            continue;
        /* an array or het job prints 12_3 or 12+0: ours are plain; a job
         * not asked about (squeue may list more) takes no place */
        char *end;
        j->id = strtoll(f[0], &end, 10);
        if (*end || j->id <= 0)
            continue;
        int asked = 0;
        json_array_foreach(rows, i, row)
            asked |= json_integer_value(json_object_get(row, "job_id")) == j->id;
        if (!asked)
            continue;
        snprintf(j->state, sizeof j->state, "%s", f[1]);
        /* "CANCELLED by 0": the state is the first word */
        j->state[strcspn(j->state, " ")] = '\0';
        snprintf(j->reason, sizeof j->reason, "%s", nf > 2 && f[2] ? f[2] : "");
        snprintf(j->node, sizeof j->node, "%s", nf > 3 && f[3] ? f[3] : "");
        n++;
    }
    subproc_result_free(&r);
    return n;
}

static void slurm_event(store *db, int64_t run, long long job, const char *state,
                        const char *reason, const char *node)
{
    json_t *d = json_pack("{s:I, s:s, s:s?, s:s?}", "job_id", (json_int_t)job, "state", state,
                          "reason", reason && reason[0] ? reason : NULL, "node",
                          node && node[0] ? node : NULL);
    char *text = d ? json_dumps(d, JSON_COMPACT) : NULL;
    if (text)
        runs_append_event(db, run, "slurm", text, NULL);
    free(text);
    json_decref(d);
}

/* The run's status from its job's state: see slurm.h. */
static void follow(slurm *s, json_t *row, const seen_job *j)
{
    store *db = s->db;
    int64_t run = json_integer_value(json_object_get(row, "run_id"));
    long long job = json_integer_value(json_object_get(row, "job_id"));
    const char *before = json_string_value(json_object_get(row, "state"));
    const char *status = json_string_value(json_object_get(row, "status"));
    const char *reported = json_string_value(json_object_get(row, "reported"));
    const char *report_error = json_string_value(json_object_get(row, "report_error"));
    int cancel = json_integer_value(json_object_get(row, "cancel_requested")) != 0 ||
                 (status && strcmp(status, "cancelled") == 0);
    gt_error err = {0};
    int changed = 0;
    const char *state = j ? j->state : "UNKNOWN";
    const char *reason = j && strcmp(j->reason, "None") != 0 ? j->reason : "";
    if (!before || strcmp(before, state) != 0) {
        slurm_event(db, run, job, state, reason, j ? j->node : NULL);
        log_msg(LOG_INFO, "slurm", "run=%lld job=%lld state=%s reason=\"%s\"", (long long)run,
                job, state, reason);
    }
    job_phase ph = j ? phase_of(state) : JOB_DONE;
    const char *reason_or_null = reason[0] ? reason : NULL;
    if (ph == JOB_WAITING) {
        slurm_jobs_observe(db, run, state, reason_or_null, NULL, &err);
        /* seen running before, waiting now: Slurm requeued it */
        if (before && phase_of(before) == JOB_RUNNING && status &&
            strcmp(status, "running") == 0) {
            /* Back in Slurm's queue after it ran: requeued (a node failed,
             * preemption, scontrol requeue).  The trainer will resume from
             * the last checkpoint it uploaded. */
            runs_transition(db, run, "running", "queued", NULL, NULL, &changed, &err);
            if (changed) {
                slurm_jobs_count_restart(db, run, &err);
                log_msg(LOG_INFO, "run", "id=%lld status=queued reason=\"slurm requeued job %lld\"",
                        (long long)run, job);
            }
        }
        return;
    }
    if (ph == JOB_RUNNING) {
        slurm_jobs_observe(db, run, state, reason_or_null, j->node, &err);
        if (strcmp(state, "RUNNING") == 0 && status && strcmp(status, "queued") == 0) {
            runs_transition(db, run, "queued", "running", NULL, NULL, &changed, &err);
            if (changed)
                log_msg(LOG_INFO, "run", "id=%lld status=running job=%lld node=%s",
                        (long long)run, job, j->node);
        }
        return;
    }
    /* The job is over. */
    char why[900];
    const char *to = "failed";
    if (strcmp(state, "COMPLETED") == 0 && reported && strcmp(reported, "succeeded") == 0) {
        to = "succeeded";
        why[0] = '\0';
    } else if (strcmp(state, "COMPLETED") == 0) {
        snprintf(why, sizeof why, "Slurm job %lld completed without the trainer reporting the"
                 " end of training%s%s", job, report_error ? ": " : "",
                 report_error ? report_error : "");
    } else if (strcmp(state, "CANCELLED") == 0) {
        to = "cancelled";
        snprintf(why, sizeof why, cancel ? "cancelled on request (scancel of Slurm job %lld)"
                                         : "Slurm job %lld was cancelled outside the service",
                 job);
    } else if (!j) {
        snprintf(why, sizeof why, "Slurm no longer knows job %lld (purged before its end was"
                 " seen)%s%s", job, report_error ? ": " : "", report_error ? report_error : "");
    } else {
        snprintf(why, sizeof why, "Slurm job %lld %s%s%s%s", job, state, reason[0] ? " (" : "",
                 reason, reason[0] ? ")" : "");
        if (report_error) {
            size_t l = strlen(why);
            snprintf(why + l, sizeof why - l, ": %s", report_error);
        }
    }
    slurm_jobs_finish(db, run, state, reason_or_null, &err);
    runs_transition(db, run, NULL, to, why[0] ? why : NULL, NULL, &changed, &err);
    if (changed)
        log_msg(LOG_INFO, "run", "id=%lld status=%s job=%lld%s%s%s", (long long)run, to, job,
                why[0] ? " error=\"" : "", why, why[0] ? "\"" : "");
}

/* scancel for the job of a run cancelled through the API (sent once; the
 * poll after sees the job CANCELLED). */
static void cancel_if_asked(slurm *s, json_t *row)
{
    int64_t run = json_integer_value(json_object_get(row, "run_id"));
    const char *status = json_string_value(json_object_get(row, "status"));
    int asked = json_integer_value(json_object_get(row, "cancel_requested")) != 0 ||
                (status && strcmp(status, "cancelled") == 0);
    if (!asked || json_integer_value(json_object_get(row, "scancel_sent")))
        return;
    char scancel[1100], id[32];
    program(&s->cfg, "scancel", scancel, sizeof scancel);
    snprintf(id, sizeof id, "%lld", (long long)json_integer_value(json_object_get(row, "job_id")));
    char *argv[] = {scancel, id, NULL};
    subproc_result r;
    if (subproc_run(argv, SLURM_CMD_TIMEOUT_MS, &r) == 0 && r.exit_code == 0) {
        gt_error err = {0};
        slurm_jobs_mark_scancel(s->db, run, &err);
        log_msg(LOG_INFO, "slurm", "run=%lld job=%s scancel=1", (long long)run, id);
    } else {
        log_msg(LOG_WARN, "slurm", "run=%lld job=%s scancel_error=\"%.200s\"", (long long)run, id,
                r.err ? r.err : "");
    }
    subproc_result_free(&r);
}

static void poll_jobs(slurm *s)
{
    json_t *rows = NULL;
    gt_error err = {0};
    if (slurm_jobs_active(s->db, &rows, &err)) {
        log_msg(LOG_ERROR, "slurm", "error=\"%s\"", err.message);
        return;
    }
    size_t n = json_array_size(rows);
    if (n == 0) {
        json_decref(rows);
        return;
    }
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
        cancel_if_asked(s, row);
    seen_job *seen = calloc(n, sizeof *seen);
    int got = seen ? squeue_all(s, rows, seen, (int)n) : -1;
    if (got >= 0) {
        json_array_foreach(rows, i, row) {
            long long job = json_integer_value(json_object_get(row, "job_id"));
            const seen_job *j = NULL;
            for (int k = 0; k < got && !j; k++)
                if (seen[k].id == job)
                    j = &seen[k];
            follow(s, row, j);
        }
    }
    free(seen);
    json_decref(rows);
}

static void *slurm_main(void *arg)
{
    slurm *s = arg;
    while (!atomic_load(&s->w.stopping)) {
        int64_t run;
        gt_error err = {0};
        /* at most a few submissions per round, so following never starves */
        for (int k = 0; k < 16 && !atomic_load(&s->w.stopping); k++) {
            int rc = slurm_jobs_next_to_submit(s->db, &run, &err);
            if (rc == GT_ENOTFOUND)
                break;
            if (rc) {
                log_msg(LOG_ERROR, "slurm", "error=\"%s\"", err.message);
                break;
            }
            submit(s, run);
            /* a run whose sbatch could not run stays queued: next round */
            int64_t again;
            if (slurm_jobs_next_to_submit(s->db, &again, &err) == GT_OK && again == run)
                break;
        }
        poll_jobs(s);
        worker_thread_nap_ms(&s->w, s->cfg.poll_ms);
    }
    return NULL;
}

int slurm_start(slurm **out, const char *db_path, const slurm_config *cfg, gt_error *err)
{
    *out = NULL;
    int rc = slurm_options_check(cfg->options, err);
    if (rc)
        return rc;
    store *db = NULL;
    if ((rc = store_open(&db, db_path, err)))
        return rc;
    slurm *s = calloc(1, sizeof *s);
    if (!s) {
        store_close(db, NULL);
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    }
    s->db = db;
    s->cfg = *cfg;
    if (s->cfg.poll_ms < 100)
        s->cfg.poll_ms = 100;
    if ((rc = worker_thread_launch(&s->w, slurm_main, s, db, "Slurm", err)))
        return rc;
    *out = s;
    return GT_OK;
}

void slurm_kick(slurm *s)
{
    if (s)
        worker_thread_kick(&s->w);
}

void slurm_stop(slurm *s)
{
    if (s)
        worker_thread_end(&s->w, s->db, s);
}
