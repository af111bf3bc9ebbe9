/* Runs on a real Slurm: Debian's slurmctld and slurmd on this host with
 * munged, all three started here as root with a private configuration in
 * a temporary directory (own munge key and socket, AuthInfo=socket=...,
 * free ports, SlurmUser=root, proctrack/linuxproc, task/none, no cgroups,
 * SLURM_CONF for the client commands), and `giant serve` on loopback.
 * - run A (executor slurm, a tiny config with model.accept) is submitted
 *   with sbatch, goes pending -> running -> succeeded as its job does, its
 *   metrics, validations and checkpoints arrive through the ingest routes
 *   (the checkpoint's bytes hash to what the listing says), and its
 *   acceptance test, trained in the job, is stored before it succeeds;
 * - run B's job is requeued by Slurm (scontrol requeue) once it has
 *   uploaded a checkpoint: the run goes back to queued, and when Slurm runs
 *   the job again (its requeue hold lifted with scontrol update
 *   StartTime=now) the trainer resumes from the last uploaded checkpoint
 *   (its log names that step);
 * - run B is then cancelled through the API: scancel, job CANCELLED, run
 *   cancelled;
 * - run C (executor.ranks 2) trains data parallel in its job: the script
 *   runs giant train --report ... --ranks 2, two CPU processes train, rank
 *   0 alone reports (each step's metrics once), and the run succeeds;
 * - run D (also 2 ranks) loses rank 1 to a SIGKILL mid-run: the launcher
 *   stops rank 0 and the run fails naming rank 1 of 2.
 * Skipped (77), with the reason, when not root, when the Slurm or munge
 * programs are missing, or when the daemons do not come up. */
#include "check.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gt_clock.h"
#include "svc_check.h"
#include "svc_harness.h"

static char dir[64];
static svc munge_d, ctld, slurmd, S;
static int have_munge, have_ctld, have_slurmd, have_giant;

static int find_program(const char *name, char *out, size_t cap)
{
    const char *dirs[] = {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin",
                          "/usr/local/bin"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(out, cap, "%s/%s", dirs[i], name);
        if (access(out, X_OK) == 0)
            return 1;
    }
    return 0;
}

static void teardown(void)
{
    /* jobs outlive slurmd (slurmstepd): cancel what is left first */
    if (have_ctld) {
        svc_sh("squeue -h -o %%i 2>/dev/null | xargs -r scancel 2>/dev/null");
        svc_sleep_ms(1000);
    }
    if (have_giant)
        svc_stop(&S, SIGTERM, 20000);
    if (have_slurmd)
        svc_stop(&slurmd, SIGTERM, 10000);
    if (have_ctld)
        svc_stop(&ctld, SIGTERM, 10000);
    if (have_munge)
        svc_stop(&munge_d, SIGTERM, 5000);
}

static void skip(const char *why)
{
    if (have_slurmd)
        svc_dump(&slurmd);
    if (have_ctld)
        svc_dump(&ctld);
    if (have_munge)
        svc_dump(&munge_d);
    teardown();
    svc_sh("rm -rf %s", dir);
    check_skip(why);
}

/* The private cluster: munged, slurmctld, slurmd; skips when they do not
 * come up. */
static void start_slurm(void)
{
    char munged[256], slurmctld[256], slurmd_p[256], sinfo[256], sbatch[256];
    if (geteuid() != 0)
        check_skip("the Slurm daemons run as root here (SlurmUser=root): run as root");
    if (!find_program("munged", munged, sizeof munged) ||
        !find_program("slurmctld", slurmctld, sizeof slurmctld) ||
        !find_program("slurmd", slurmd_p, sizeof slurmd_p) ||
        !find_program("sinfo", sinfo, sizeof sinfo) ||
        !find_program("sbatch", sbatch, sizeof sbatch))
        check_skip("munged, slurmctld, slurmd or the Slurm client commands are not installed"
                   " (Debian: munge slurmctld slurmd slurm-client; deploy/install-deps.sh)");
    char p[256], conf[256], host[128] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(p, sizeof p, "%s/munge", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/state", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/spool", dir);
    mkdir(p, 0755);
    /* a private munge key: 1024 random bytes, readable by root only */
    snprintf(p, sizeof p, "%s/munge/key", dir);
    unsigned char key[1024];
    int rnd = open("/dev/urandom", O_RDONLY);
    CHECK(rnd >= 0 && read(rnd, key, sizeof key) == (ssize_t)sizeof key);
    if (rnd >= 0)
        close(rnd);
    int kf = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(kf >= 0 && write(kf, key, sizeof key) == (ssize_t)sizeof key);
    if (kf >= 0)
        close(kf);
    char key_opt[300], sock_opt[300], pid_opt[300], seed_opt[300], log_opt[300];
    snprintf(key_opt, sizeof key_opt, "--key-file=%s/munge/key", dir);
    snprintf(sock_opt, sizeof sock_opt, "--socket=%s/munge/sock", dir);
    snprintf(pid_opt, sizeof pid_opt, "--pid-file=%s/munge/pid", dir);
    snprintf(seed_opt, sizeof seed_opt, "--seed-file=%s/munge/seed", dir);
    snprintf(log_opt, sizeof log_opt, "--log-file=%s/munge/log", dir);
    char *margv[] = {munged, "-F", "--force", key_opt, sock_opt, pid_opt, seed_opt, log_opt,
                     NULL};
    if (svc_spawn(&munge_d, margv) != 0)
        skip("munged could not be started");
    have_munge = 1;
    snprintf(p, sizeof p, "%s/munge/sock", dir);
    struct stat st;
    for (int t = 0; t < 100 && stat(p, &st) != 0; t++)
        svc_sleep_ms(50);
    if (stat(p, &st) != 0)
        skip("munged did not create its socket");

    int port_ctld = svc_free_port(), port_d = svc_free_port();
    while (port_d == port_ctld)
        port_d = svc_free_port();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(conf, sizeof conf, "%s/slurm.conf", dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        skip("cannot write slurm.conf");
    fprintf(f,
            "ClusterName=giant-test\n"
            "SlurmctldHost=localhost\n"
            "SlurmctldPort=%d\n"
            "SlurmdPort=%d\n"
            "SlurmUser=root\n"
            "SlurmdUser=root\n"
            "AuthType=auth/munge\n"
            "CredType=cred/munge\n"
            "AuthInfo=socket=%s/munge/sock\n"
            "StateSaveLocation=%s/state\n"
            "SlurmdSpoolDir=%s/spool\n"
            "SlurmctldPidFile=%s/slurmctld.pid\n"
            "SlurmdPidFile=%s/slurmd.pid\n"
            "ProctrackType=proctrack/linuxproc\n"
            "TaskPlugin=task/none\n"
            "JobAcctGatherType=jobacct_gather/none\n"
            "AccountingStorageType=accounting_storage/none\n"
            "SchedulerType=sched/builtin\n"
            "SelectType=select/cons_tres\n"
            "SelectTypeParameters=CR_CPU\n"
            "SlurmdParameters=config_overrides\n"
            "ReturnToService=2\n"
            "MpiDefault=none\n"
            "SwitchType=switch/none\n"
            "MailProg=/bin/true\n"
            "KillWait=2\n"
            "MinJobAge=300\n"
            "SlurmctldTimeout=30\n"
            "SlurmdTimeout=30\n"
            "NodeName=localhost NodeHostname=%s NodeAddr=127.0.0.1 CPUs=%ld RealMemory=500"
            " State=UNKNOWN\n"
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            port_ctld, port_d, dir, dir, dir, dir, dir, host, cpus > 0 ? cpus : 1);
    fclose(f);
    setenv("SLURM_CONF", conf, 1);
    char *cargv[] = {slurmctld, "-D", "-i", "-f", conf, NULL};
    if (svc_spawn(&ctld, cargv) != 0)
        skip("slurmctld could not be started");
    have_ctld = 1;
    char *dargv[] = {slurmd_p, "-D", "-N", "localhost", "-f", conf, NULL};
    if (svc_spawn(&slurmd, dargv) != 0)
        skip("slurmd could not be started");
    have_slurmd = 1;
    for (int t = 0; t < 60; t++) {
        if (svc_sh("sinfo -h -o %%T 2>/dev/null | grep -q idle") == 0)
            return;
        svc_sleep_ms(250);
    }
    skip("slurmctld and slurmd did not bring the node up within 15 s (their logs above)");
}

static json_t *get_run(gc_client *c, long long id)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/runs/%lld", id);
    json_t *j = NULL;
    svc_json(c, "GET", path, NULL, NULL, &j);
    return j;
}

static const char *jstr(json_t *o, const char *a, const char *b)
{
    json_t *v = json_object_get(o, a);
    if (b)
        v = json_object_get(v, b);
    return json_string_value(v) ? json_string_value(v) : "";
}

static long long jint(json_t *o, const char *a, const char *b)
{
    json_t *v = json_object_get(o, a);
    if (b)
        v = json_object_get(v, b);
    return json_integer_value(v);
}

/* Polls the run until cond holds (or ms pass); the last run object. */
typedef int (*run_cond)(json_t *run, void *arg);
static json_t *wait_until(gc_client *c, long long id, run_cond cond, void *arg, long ms)
{
    json_t *j = NULL;
    for (long t = 0; t <= ms; t += 100) {
        json_decref(j);
        j = get_run(c, id);
        if (j && cond(j, arg))
            return j;
        svc_sleep_ms(100);
    }
    return j;
}

static int status_is(json_t *run, void *want)
{
    return strcmp(jstr(run, "status", NULL), want) == 0;
}

static int job_state_is(json_t *run, void *want)
{
    return strcmp(jstr(run, "executor", "state"), want) == 0;
}

/* POSTs the run config cfg (freed), checking the 201; the run's id, and
 * its reply in *reply when asked for (else freed). */
static long long submit(gc_client *c, char *cfg, json_t **reply)
{
    json_t *j = NULL;
    CHECK_EQ_INT(svc_json(c, "POST", "/v1/runs", cfg, NULL, &j), 201);
    free(cfg);
    long long id = jint(j, "id", NULL);
    if (reply)
        *reply = j;
    else
        json_decref(j);
    return id;
}

/* The run object's status is want; a failure names the run, its status,
 * its error and its job's state. */
static void check_status(json_t *run, const char *want, const char *name)
{
    CHECK_MSG(status_is(run, (void *)want), "%s: %s (%s), job %s", name,
              jstr(run, "status", NULL), jstr(run, "error", NULL), jstr(run, "executor", "state"));
}

/* The run's losses: a series per stage, count points each. */
static void check_loss_series(gc_client *c, long long run, long long count)
{
    char path[160];
    json_t *j = NULL, *s;
    size_t i;
    snprintf(path, sizeof path, "/v1/runs/%lld/metrics?name=loss", run);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    CHECK_EQ_INT((long long)json_array_size(json_object_get(j, "series")), 2);
    json_array_foreach(json_object_get(j, "series"), i, s)
        CHECK_EQ_INT(jint(s, "count", NULL), count);
    json_decref(j);
}

static int has_checkpoint(json_t *run, void *arg)
{
    (void)arg;
    return strcmp(jstr(run, "status", NULL), "running") == 0 &&
           json_object_size(json_object_get(run, "best")) > 0;
}

static int requeued(json_t *run, void *arg)
{
    (void)arg;
    return jint(run, "executor", "restarts") == 1 &&
           strcmp(jstr(run, "status", NULL), "queued") == 0;
}

static int running_again(json_t *run, void *arg)
{
    (void)arg;
    return jint(run, "executor", "restarts") == 1 &&
           strcmp(jstr(run, "status", NULL), "running") == 0 &&
           strcmp(jstr(run, "executor", "state"), "RUNNING") == 0;
}

/* Every event of a run that has ended, as "kind:value" words. */
typedef struct trail {
    char text[16384];
} trail;

static int on_event(void *user, long long id, const char *event, const char *data)
{
    (void)id;
    trail *t = user;
    json_t *d = json_loads(data, 0, NULL);
    const char *v = strcmp(event, "slurm") == 0        ? jstr(d, "state", NULL)
                    : strcmp(event, "status") == 0     ? jstr(d, "status", NULL)
                    : strcmp(event, "acceptance") == 0 ? "stored"
                                                       : NULL;
    size_t k = strlen(t->text);
    if (v && k + 64 < sizeof t->text)
        snprintf(t->text + k, sizeof t->text - k, "%s:%s ", event, v);
    json_decref(d);
    return 0;
}

static int file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

static char *config(const char *name, int steps1, int steps2, int log_every, int ckpt_every)
{
    char *text = svc_tiny_config(name, steps1, log_every, ckpt_every, NULL);
    json_t *c = json_loads(text, 0, NULL);
    free(text);
    json_object_set_new(json_object_get(json_object_get(c, "train"), "steps"), "stage2",
                        json_integer(steps2));
    json_object_set_new(c, "executor", json_pack("{s:s, s:i}", "kind", "slurm",
                                                 "time_limit_min", 10));
    text = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    return text;
}

/* config() with executor.ranks 2: the job's trainer launches two CPU
 * processes. */
static char *two_rank_config(const char *name, int steps1, int steps2, int log_every,
                             int ckpt_every)
{
    char *text = config(name, steps1, steps2, log_every, ckpt_every);
    json_t *c = json_loads(text, 0, NULL);
    free(text);
    json_object_set_new(json_object_get(c, "executor"), "ranks", json_integer(2));
    text = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    return text;
}

int main(void)
{
    double t0 = gt_clock_s();
    snprintf(dir, sizeof dir, "/tmp/giant-slurm-XXXXXX");
    if (!mkdtemp(dir))
        check_skip("cannot make a temporary directory");
    chmod(dir, 0755);
    start_slurm();
    double t_up = gt_clock_s();
    printf("slurm up in %.1f s\n", t_up - t0);

    char db[320], data[320];
    snprintf(db, sizeof db, "%s/giant.db", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    const char *extra[] = {"--slurm-poll-ms", "250", NULL};
    if (svc_start(&S, db, data, extra) != 0) {
        svc_dump(&S);
        CHECK_MSG(0, "giant serve did not start");
        teardown();
        return check_finish();
    }
    have_giant = 1;
    /* logged just after "listening", which svc_start waits for: wait for it too */
    CHECK(svc_log_wait(&S, "msg=slurm available=1", 10000));
    gt_error err = {0};
    gc_client *c = svc_check_client(&S);
    json_t *j = NULL;

    /* run A: pending -> running -> succeeded, everything through ingest,
     * with an acceptance test (small: 100 showers, a narrow classifier) */
    long long a = submit(c, svc_with_accept(config("slurm-a", 30, 30, 5, 10), 100, 8, 3, 0), NULL);
    j = wait_until(c, a, job_state_is, "COMPLETED", 60000);
    check_status(j, "succeeded", "run A");
    long long job_a = jint(j, "executor", "job_id");
    CHECK(job_a > 0);
    CHECK_MSG(jint(j, "acceptance", "showers") == 100, "run A's acceptance test: %lld showers",
              jint(j, "acceptance", "showers"));
    CHECK_EQ_INT(jint(j, "progress", "done_steps"), 60);
    json_decref(j);
    trail ta = {""};
    CHECK_EQ_INT(gc_watch_events(c, a, 0, on_event, &ta, &err), GT_OK);
    const char *pending = strstr(ta.text, "slurm:PENDING");
    const char *running = strstr(ta.text, "status:running");
    const char *succeeded = strstr(ta.text, "status:succeeded");
    const char *tested = strstr(ta.text, "acceptance:stored");
    CHECK_MSG(pending && running && succeeded && tested && pending < running &&
                  running < tested && tested < succeeded,
              "run A's events: %s", ta.text);
    check_loss_series(c, a, 6);
    char path[160];
    snprintf(path, sizeof path, "/v1/runs/%lld/metrics?name=val_loss", a);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    CHECK_EQ_INT((long long)json_array_size(json_object_get(j, "series")), 2);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/runs/%lld/checkpoints", a);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    json_t *items = json_object_get(j, "items");
    CHECK(json_array_size(items) >= 2);
    json_t *last = json_array_get(items, json_array_size(items) - 1);
    char ckpath[160], want[65];
    snprintf(ckpath, sizeof ckpath, "/v1/runs/%lld/checkpoints/%lld", a, jint(last, "id", NULL));
    snprintf(want, sizeof want, "%s", jstr(last, "sha256", NULL));
    CHECK_EQ_INT(jint(last, "step", NULL), 30);
    json_decref(j);
    gc_response r;
    CHECK_EQ_INT(gc_request(c, "GET", ckpath, NULL, NULL, 0, NULL, &r, &err), GT_OK);
    CHECK(r.status == 200 && strcmp(r.checksum, want) == 0 && r.len > 0);
    gc_response_free(&r);
    double t_a = gt_clock_s();
    printf("run A succeeded on Slurm in %.1f s\n", t_a - t_up);

    /* run B: requeued after its first checkpoint, resumed from it */
    long long b = submit(c, config("slurm-b", 200, 20000, 10, 20), NULL);
    j = wait_until(c, b, has_checkpoint, NULL, 60000);
    long long job_b = jint(j, "executor", "job_id");
    CHECK_MSG(has_checkpoint(j, NULL) && job_b > 0, "run B: %s, no checkpoint",
              jstr(j, "status", NULL));
    json_decref(j);
    CHECK_EQ_INT(svc_sh("scontrol requeue %lld", job_b), 0);
    j = wait_until(c, b, requeued, NULL, 20000);
    CHECK_MSG(requeued(j, NULL), "run B after the requeue: %s, restarts %lld, job %s",
              jstr(j, "status", NULL), jint(j, "executor", "restarts"),
              jstr(j, "executor", "state"));
    json_decref(j);
    /* the old trainer is gone: its newest upload is where the next one
     * must start */
    snprintf(path, sizeof path, "/v1/runs/%lld/checkpoints", b);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    long long newest[2] = {-1, -1};
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(j, "items"), i, s) {
        int k = strcmp(jstr(s, "stage", NULL), "shower") == 0;
        if (jint(s, "step", NULL) > newest[k])
            newest[k] = jint(s, "step", NULL);
    }
    json_decref(j);
    CHECK(newest[0] > 0);
    char resume_line[96];
    if (newest[1] >= 0 || newest[0] >= 200)
        snprintf(resume_line, sizeof resume_line, "training stage 2 (shower) from step %lld",
                 newest[1] >= 0 ? newest[1] : 0);
    else
        snprintf(resume_line, sizeof resume_line, "training stage 1 (energy) from step %lld",
                 newest[0]);
    /* Slurm holds a requeued job (BeginTime) for a while: lift it */
    CHECK_EQ_INT(svc_sh("scontrol update jobid=%lld StartTime=now", job_b), 0);
    j = wait_until(c, b, running_again, NULL, 30000);
    CHECK_MSG(running_again(j, NULL), "run B not running again: %s, job %s",
              jstr(j, "status", NULL), jstr(j, "executor", "state"));
    CHECK_EQ_INT(jint(j, "attempts", NULL), 2);
    json_decref(j);
    char out[400];
    snprintf(out, sizeof out, "%s/slurm/run-%lld-%lld.out", data, b, job_b);
    int resumed = 0;
    for (int t = 0; t < 300 && !resumed; t++) {
        resumed = file_has(out, "resuming from stage 1 checkpoint") &&
                  file_has(out, resume_line);
        if (!resumed)
            svc_sleep_ms(100);
    }
    CHECK_MSG(resumed, "the requeued job did not resume with '%s' (%s)", resume_line, out);
    double t_b = gt_clock_s();
    printf("run B requeued and resumed in %.1f s\n", t_b - t_a);

    /* cancelled through the API: scancel */
    snprintf(path, sizeof path, "/v1/runs/%lld/cancel", b);
    CHECK_EQ_INT(svc_json(c, "POST", path, NULL, NULL, &j), 202);
    json_decref(j);
    j = wait_until(c, b, job_state_is, "CANCELLED", 20000);
    check_status(j, "cancelled", "run B");
    CHECK(strstr(jstr(j, "error", NULL), "scancel") != NULL);
    json_decref(j);
    printf("run B cancelled in %.1f s\n", gt_clock_s() - t_b);
    double t_c0 = gt_clock_s();

    /* run C: data parallel in its job (executor.ranks 2: the job's trainer
     * launches two CPU processes, rank 0 reports), every step once */
    long long rc_id = submit(c, two_rank_config("slurm-c", 30, 30, 5, 10), &j);
    /* recorded as given (written back only when set) */
    CHECK_EQ_INT(json_integer_value(json_object_get(
                     json_object_get(json_object_get(j, "config"), "executor"), "ranks")), 2);
    json_decref(j);
    j = wait_until(c, rc_id, job_state_is, "COMPLETED", 90000);
    check_status(j, "succeeded", "run C");
    CHECK_EQ_INT(jint(j, "progress", "done_steps"), 60);
    long long job_c = jint(j, "executor", "job_id");
    json_decref(j);
    snprintf(out, sizeof out, "%s/slurm/run-%lld.sh", data, rc_id);
    CHECK_MSG(file_has(out, " --ranks 2"), "run C's job script has no --ranks 2");
    snprintf(out, sizeof out, "%s/slurm/run-%lld-%lld.out", data, rc_id, job_c);
    CHECK_MSG(file_has(out, "2 ranks (CPU processes, shared memory)"), "run C's log: %s", out);
    check_loss_series(c, rc_id, 6);   /* reported by rank 0 alone */
    snprintf(path, sizeof path, "/v1/runs/%lld/checkpoints", rc_id);
    CHECK_EQ_INT(svc_json(c, "GET", path, NULL, NULL, &j), 200);
    CHECK(json_array_size(json_object_get(j, "items")) >= 2);
    json_decref(j);
    printf("run C (2 ranks) succeeded on Slurm in %.1f s\n", gt_clock_s() - t_c0);

    /* run D: a rank other than 0 dies (SIGKILL): the launcher stops the
     * other and reports which rank failed */
    double t_d0 = gt_clock_s();
    long long d = submit(c, two_rank_config("slurm-d", 200, 20000, 10, 20), NULL);
    j = wait_until(c, d, has_checkpoint, NULL, 60000);
    json_decref(j);
    /* rank 1 trains the config file the launcher wrote; rank 0 has the
     * start reply */
    CHECK_EQ_INT(svc_sh("pkill -KILL -f 'giant-report[.].*/config[.]json'"), 0);
    j = wait_until(c, d, status_is, "failed", 30000);
    CHECK_MSG(status_is(j, "failed") && strstr(jstr(j, "error", NULL), "rank 1 of 2"),
              "run D: %s (%s)", jstr(j, "status", NULL), jstr(j, "error", NULL));
    json_decref(j);
    printf("run D failed with its rank in %.1f s; %.1f s in all\n", gt_clock_s() - t_d0,
           gt_clock_s() - t0);

    gc_close(c);
    if (check_failures_) {
        svc_dump(&S);
        svc_dump(&ctld);
        svc_dump(&slurmd);
    }
    teardown();
    svc_free(&S);
    svc_free(&ctld);
    svc_free(&slurmd);
    svc_free(&munge_d);
    svc_check_cleanup(dir);
    return check_finish();
}
