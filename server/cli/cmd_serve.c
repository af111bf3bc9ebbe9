/* giant serve: the HTTP service.
 *
 * Start-up order: settings, data directory, database (migrated), the token
 * policy (a non-loopback address needs a token in the database), engine
 * (devices), routes, HTTP.  Shutdown on SIGTERM/SIGINT: stop accepting,
 * let in-flight requests finish (up to --shutdown-grace seconds; a second
 * signal cuts that short), close every connection, close the database.
 *
 * With --role sampler (a stateless sampling replica, replica.h) the
 * database is an in-memory one, no data directory is made, only the
 * sampling worker runs (no scheduler, datasets or evaluations), its tokens
 * are those of --token-file (with them it requires tokens and may listen
 * on any address; without, loopback only), the routes
 * that need a trainer answer 404 not_on_sampler, and the models of
 * --models are loaded after HTTP starts, so /healthz answers at once and
 * /readyz turns ready when they are in. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "auth.h"
#include "commands.h"
#include "datasets.h"
#include "datasets_worker.h"
#include "evaluations_worker.h"
#include "sampling.h"
#include "scheduler.h"
#include "http.h"
#include "ingest.h"
#include "log.h"
#include "model_backend.h"
#include "nn_backend.h"
#include "replica.h"
#include "routes.h"
#include "settings.h"
#include "slurm.h"
#include "store.h"
#ifdef GIANT_HAVE_CUDA
#include "cuda_devices.h"
#endif

static serve_routes_fn extra_routes;

void cmd_serve_set_extra_routes(serve_routes_fn fn)
{
    extra_routes = fn;
}

/* The stop signals.  Every thread this file starts inherits them blocked,
 * but a library may start threads before main: OpenBLAS's pthreads build
 * does, in its constructor, with nothing blocked.  The kernel may hand a
 * process-directed SIGTERM to such a thread (it does whenever the main
 * thread is not waiting for it, say while Slurm is probed at start-up), and
 * without a handler the default action would kill the service mid-request.
 * So the signals have a handler, wherever they land: it counts them and
 * wakes the main thread through a pipe (write is async-signal-safe; the
 * counter is a lock-free atomic). */
static atomic_int stop_count;
static atomic_int stop_last;
static int stop_pipe[2] = { -1, -1 };

static void on_stop_signal(int sig)
{
    int saved = errno;
    atomic_store(&stop_last, sig);
    atomic_fetch_add(&stop_count, 1);
    if (stop_pipe[1] >= 0) {
        ssize_t w = write(stop_pipe[1], "s", 1);
        (void)w;   /* a full pipe already wakes the reader */
    }
    errno = saved;
}

static int stop_signals_install(const sigset_t *sigs)
{
    if (pipe(stop_pipe) != 0)
        return -1;
    for (int i = 0; i < 2; i++)
        if (fcntl(stop_pipe[i], F_SETFD, FD_CLOEXEC) != 0 ||
            fcntl(stop_pipe[i], F_SETFL, O_NONBLOCK) != 0)
            return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigfillset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL))
        return -1;
    /* Blocked in this thread before any thread of ours exists, so every
     * one of them inherits the mask; only stop_wait lets them in. */
    return pthread_sigmask(SIG_BLOCK, sigs, NULL);
}

/* Waits up to timeout_ms (-1: for ever) until the count of stop signals
 * passes *seen; returns the signal that did, or 0 on timeout.  pselect lets
 * the signals in for the wait only, atomically, so one that is pending (no
 * other thread takes it) is delivered here, and one taken by a library's
 * thread wakes the poll through the pipe. */
static int stop_wait(const sigset_t *sigs, int *seen, long timeout_ms)
{
    sigset_t during;
    pthread_sigmask(SIG_BLOCK, NULL, &during);
    for (int s = 1; s < NSIG; s++)
        if (sigismember(sigs, s) == 1)
            sigdelset(&during, s);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (timeout_ms >= 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    for (;;) {
        int n = atomic_load(&stop_count);
        if (n > *seen) {
            *seen = n;
            return atomic_load(&stop_last);
        }
        struct timespec left, *lp = NULL;
        if (timeout_ms >= 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            long long ns = (long long)(until.tv_sec - now.tv_sec) * 1000000000LL +
                           (until.tv_nsec - now.tv_nsec);
            if (ns <= 0)
                return 0;
            left.tv_sec = (time_t)(ns / 1000000000LL);
            left.tv_nsec = (long)(ns % 1000000000LL);
            lp = &left;
        }
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(stop_pipe[0], &rd);
        if (pselect(stop_pipe[0] + 1, &rd, NULL, NULL, lp, &during) > 0) {
            char buf[64];
            while (read(stop_pipe[0], buf, sizeof buf) > 0)
                ;
        }
    }
}

static int ensure_dir(const char *path, gt_error *err)
{
    struct stat st;
    if (mkdir(path, 0755) == 0)
        return GT_OK;
    if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return GT_OK;
    return gt_error_set(err, GT_EIO, "data directory %s: %s", path,
                        errno == EEXIST ? "exists and is not a directory" : strerror(errno));
}

/* Lists devices once: the CUDA runtime's first call costs a context set-up,
 * far too slow to repeat per /v1/info request. */
static void engine_init(app *a)
{
#ifdef GIANT_HAVE_CUDA
    gt_devices_set_gpu_query(cuda_devices_query);
    /* /metrics reads each listed GPU's memory: the service's GPUs */
    gt_devices_set_gpu_memory_query(cuda_devices_memory);
#endif
    gt_error err = { 0 };
    if (gt_devices_query(a->devices, APP_MAX_DEVICES, &a->ndevices, &err) != GT_OK) {
        a->engine_ok = 0;
        snprintf(a->engine_error, sizeof a->engine_error, "%s", err.message);
        log_msg(LOG_ERROR, "engine", "error=\"%s\"", err.message);
        return;
    }
    a->engine_ok = 1;
    nn_backend *cpu = NULL;
    if (model_backend_open("cpu", &cpu, &err) == GT_OK) {
        for (int i = 0; i < 2; i++) {
            const char *k = model_backend_cpu_kernel(cpu, i ? NN_BF16 : NN_F32);
            snprintf(a->cpu_kernel[i], sizeof a->cpu_kernel[i], "%s", k ? k : "none");
        }
        nn_backend_close(cpu);
    } else {
        snprintf(a->cpu_kernel[0], sizeof a->cpu_kernel[0], "none");
        snprintf(a->cpu_kernel[1], sizeof a->cpu_kernel[1], "none");
    }
    for (int i = 0; i < a->ndevices; i++) {
        const gt_device_info *d = &a->devices[i];
        log_msg(LOG_INFO, "device", "kind=%s index=%d cc=%d.%d memory_mib=%zu cores=%d bf16=%d",
                d->kind, d->index, d->cc_major, d->cc_minor, d->memory_bytes >> 20, d->cores,
                d->bf16);
    }
}

/* Refuses a non-loopback address while the database holds no usable
 * token (anyone who reaches the port would get in), then makes the guard
 * the HTTP layer asks about every request.  0 when serve must stop. */
static int token_policy(app *a, const char *host, auth_guard **guard)
{
    long long usable = 0;
    gt_error err = { 0 };
    char why[1024];
    if (auth_token_count_usable(a->db, &usable, &err) != GT_OK) {
        log_msg(LOG_ERROR, "startup", "error=\"%s\"", err.message);
        return 0;
    }
    /* A replica's in-memory database holds only the tokens of its
     * --token-file, and the trainer's advice (create one in --db) would
     * not help it. */
    if (a->replica && !auth_listen_allowed(host, usable, a->cfg.db, why, sizeof why)) {
        log_msg(LOG_ERROR, "startup", "error=\"a sampling replica has no tokens to check:"
                " give it --token-file FILE, or listen on a loopback address, behind a balancer"
                " on the same host (not '%s')\"", host);
        return 0;
    }
    if (!auth_listen_allowed(host, usable, a->cfg.db, why, sizeof why)) {
        log_msg(LOG_ERROR, "startup", "error=\"%s\"", why);
        return 0;
    }
    if (a->cfg.require_tokens && usable == 0)
        log_msg(LOG_WARN, "auth", "note=\"--require-tokens 1 and no usable token: every request"
                " but /healthz and /readyz gets 401; create one with giant token create\"");
    auth_config ac = { (int)a->cfg.require_tokens, (int)a->cfg.public_metrics,
                       a->cfg.rate_limit, a->cfg.rate_burst };
    if (auth_guard_new(guard, a->db, &ac, &err) != GT_OK) {
        log_msg(LOG_ERROR, "startup", "error=\"%s\"", err.message);
        return 0;
    }
    log_msg(LOG_INFO, "auth", "usable_tokens=%lld require_tokens=%ld public_metrics=%ld"
            " rate_limit=%ld rate_burst=%ld", usable, a->cfg.require_tokens,
            a->cfg.public_metrics, a->cfg.rate_limit, a->cfg.rate_burst);
    return 1;
}

/* Waits for the in-flight requests to finish; returns how many did not. */
/* Streams an address may hold: --max-streams-per-ip, but always one
 * connection fewer than --per-ip-connections, so the address keeps one for
 * its other requests whatever the two settings say. */
static long streams_per_ip(const settings *cfg)
{
    long n = cfg->max_streams_per_ip;
    if (cfg->per_ip_connections > 0 && (n == 0 || n >= cfg->per_ip_connections))
        n = cfg->per_ip_connections > 1 ? cfg->per_ip_connections - 1 : 1;
    return n;
}

/* The admin listener (--admin-listen): /healthz, /readyz and /metrics only,
 * on a daemon of its own with one thread and a few connections, so neither
 * a flood of half-open connections nor a client's event streams on the
 * API's port can take a probe's or a scrape's connection.  Its limits are
 * fixed: probes and scrapers open one connection at a time. */
enum { ADMIN_CONNECTIONS = 32, ADMIN_PER_IP = 8 };

static int admin_start(app *a, const http_config *api, http_router **router,
                       http_server **out, gt_error *err)
{
    char host[256];
    int port;
    int rc = settings_split_listen(a->cfg.admin_listen, host, sizeof host, &port, err);
    if (rc != GT_OK)
        return rc;
    *router = http_router_new();
    if (!*router)
        return gt_error_set(err, GT_ENOMEM, "out of memory");
    if ((rc = routes_register_admin(*router, err)) != GT_OK)
        return rc;
    http_config hc = *api;
    hc.host = host;
    hc.port = port;
    hc.threads = 1;
    hc.max_connections = ADMIN_CONNECTIONS;
    hc.per_ip_connections = ADMIN_PER_IP;
    if ((rc = http_server_start(out, &hc, *router, a, err)) != GT_OK)
        return rc;
    int v6 = strchr(host, ':') != NULL;
    log_msg(LOG_INFO, "admin_listening", "addr=%s%s%s:%d routes=/healthz,/readyz,/metrics",
            v6 ? "[" : "", host, v6 ? "]" : "", http_server_port(*out));
    return GT_OK;
}

static int drain(http_server *srv, const sigset_t *sigs, int *seen, long grace_s)
{
    struct timespec until, now;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += grace_s;
    for (;;) {
        int left = http_server_in_flight(srv);
        if (left == 0)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > until.tv_sec ||
            (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec))
            return left;
        int sig = stop_wait(sigs, seen, 10);
        if (sig > 0) {
            log_msg(LOG_WARN, "shutdown", "signal=%d in_flight=%d note=second-signal-stops-now",
                    sig, left);
            return left;
        }
    }
}

/* The Slurm thread's settings, with the defaults that need the running
 * service filled: its bound port, its own binary, absolute directories. */
static void slurm_settings(const app *a, const char *host, int port, slurm_config *sc)
{
    const settings *c = &a->cfg;
    memset(sc, 0, sizeof *sc);
    snprintf(sc->bin_dir, sizeof sc->bin_dir, "%s", c->slurm_bin);
    snprintf(sc->partition, sizeof sc->partition, "%s", c->slurm_partition);
    sc->time_limit_min = c->slurm_time_limit;
    snprintf(sc->gres, sizeof sc->gres, "%s", c->slurm_gres);
    snprintf(sc->options, sizeof sc->options, "%s", c->slurm_options);
    sc->poll_ms = c->slurm_poll_ms;
    if (c->slurm_report_url[0]) {
        snprintf(sc->report_url, sizeof sc->report_url, "%s", c->slurm_report_url);
    } else {
        /* a wildcard address is reached by this host's name */
        char name[256];
        const char *h = host;
        if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 || !host[0]) {
            if (gethostname(name, sizeof name - 1) == 0) {
                name[sizeof name - 1] = '\0';
                h = name;
            }
        }
        int v6 = strchr(h, ':') != NULL;
        snprintf(sc->report_url, sizeof sc->report_url, "http://%s%s%s:%d", v6 ? "[" : "", h,
                 v6 ? "]" : "", port);
    }
    if (c->slurm_giant[0]) {
        snprintf(sc->giant, sizeof sc->giant, "%s", c->slurm_giant);
    } else {
        ssize_t n = readlink("/proc/self/exe", sc->giant, sizeof sc->giant - 1);
        sc->giant[n > 0 ? n : 0] = '\0';
        if (n <= 0)
            snprintf(sc->giant, sizeof sc->giant, "giant");
    }
    char data[PATH_MAX];
    if (!realpath(c->data_dir, data))
        snprintf(data, sizeof data, "%s", c->data_dir);
    if (c->slurm_data_dir[0])
        snprintf(sc->node_data_dir, sizeof sc->node_data_dir, "%s", c->slurm_data_dir);
    else
        snprintf(sc->node_data_dir, sizeof sc->node_data_dir, "%.1000s", data);
    if (c->slurm_job_dir[0])
        snprintf(sc->job_dir, sizeof sc->job_dir, "%s", c->slurm_job_dir);
    else
        snprintf(sc->job_dir, sizeof sc->job_dir, "%.1000s/slurm", data);
}

/* What giant serve holds while it runs; serve_free lets go of it in one
 * order whatever was started. */
typedef struct serve {
    app a;                     /* the handlers' context: stays here */
    int sampler;               /* --role sampler */
    char host[256];
    int port;
    http_router *router, *admin_router;
    http_server *srv, *admin;
    auth_guard *guard;
    slurm_config sc;
} serve;

/* The database (a replica's in memory, with its --token-file's tokens) at
 * this binary's schema.  1, or 0 after logging why. */
static int open_database(serve *s, gt_error *err)
{
    app *a = &s->a;
    int applied = 0;
    /* A replica writes nothing that outlives it: its models go into an
     * in-memory database, the same schema a trainer's file has. */
    const char *db_path = s->sampler ? ":memory:" : a->cfg.db;
    if ((s->sampler ? replica_new(&a->replica, a->cfg.models, a->cfg.model_url,
                                  a->cfg.model_token, err)
                    : ensure_dir(a->cfg.data_dir, err)) != GT_OK ||
        store_open_migrated(&a->db, db_path, &applied, &a->schema_latest, err) != GT_OK) {
        log_msg(LOG_ERROR, "startup", "error=\"%s\"", err->message);
        return 0;
    }
    /* A replica's tokens come from its --token-file, and with them every
     * request needs one, loopback ones too (as --require-tokens 1). */
    if (s->sampler && a->cfg.token_file[0]) {
        long long ntok = 0;
        if (replica_token_file(a->db, a->cfg.token_file, &ntok, err) != GT_OK) {
            log_msg(LOG_ERROR, "startup", "error=\"%s\"", err->message);
            return 0;
        }
        a->cfg.require_tokens = 1;
        log_msg(LOG_INFO, "auth", "token_file=%s tokens=%lld require_tokens=1",
                a->cfg.token_file, ntok);
    }
    log_msg(LOG_INFO, "database", "path=%s schema_version=%d applied=%d role=%s", db_path,
            a->schema_latest, applied, a->cfg.role);
    return 1;
}

/* Workers before HTTP: a request may queue work at once.  Each worker that
 * writes has its own connection (WAL: readers never wait).  A replica has
 * the sampling worker only.  1, or 0 after logging why. */
static int start_workers(serve *s, gt_error *err)
{
    app *a = &s->a;
    int trainer = !s->sampler;
    if ((trainer &&
         (datasets_ensure_default(a->db, a->cfg.default_dataset, err) != GT_OK ||
          datasets_worker_start(&a->datasets, a->cfg.db, a->cfg.data_dir, err) != GT_OK ||
          sched_start(&a->sched, a->cfg.db, a->cfg.data_dir, a->cfg.device,
                      a->cfg.allow_bf16_emulation ? MODEL_BF16_EMULATE : MODEL_BF16_NATIVE,
                      err) != GT_OK)) ||
        sampling_start(&a->sampling, a->db, a->cfg.device, (int)a->cfg.sampler_cache,
                       (int)a->cfg.batch_delay_ms, err) != GT_OK ||
        (trainer && evaluations_worker_start(&a->evaluations, a->cfg.db, a->cfg.data_dir,
                                             a->sampling, err) != GT_OK) ||
        (trainer && (slurm_options_check(a->cfg.slurm_options, err) != GT_OK ||
                     ingest_open(&a->ingest, a->cfg.db, err) != GT_OK))) {
        log_msg(LOG_ERROR, "startup", "error=\"%s\"", err->message);
        return 0;
    }
    if (trainer) {
        /* Whether runs may name executor slurm is known before HTTP
         * starts; the thread itself needs the bound port (start_http). */
        slurm_settings(a, s->host, s->port, &s->sc);
        if (!slurm_available(&s->sc, a->slurm_why, sizeof a->slurm_why))
            log_msg(LOG_INFO, "slurm", "available=0 why=\"%s\"", a->slurm_why);
    }
    return 1;
}

/* The routes, the API's listener and the admin one; then what needs the
 * bound port or HTTP answering (the Slurm thread, a replica's models).
 * 1, or 0 after logging why. */
static int start_http(serve *s, gt_error *err)
{
    app *a = &s->a;
    s->router = http_router_new();
    if (!s->router || routes_register_role(s->router, s->sampler, err) != GT_OK ||
        (extra_routes && extra_routes(s->router, err) != GT_OK)) {
        log_msg(LOG_ERROR, "startup", "error=\"routes: %s\"",
                s->router ? err->message : "no memory");
        return 0;
    }
    http_config hc = {
        .host = s->host,
        .port = s->port,
        .threads = (unsigned)a->cfg.threads,
        .max_body_bytes = (size_t)a->cfg.max_body_bytes,
        .max_file_body_bytes = (size_t)a->cfg.max_model_bytes,
        .max_connections = (unsigned)a->cfg.max_connections,
        .per_ip_connections = (unsigned)a->cfg.per_ip_connections,
        .connection_memory = (size_t)a->cfg.connection_memory,
        .timeout_s = (unsigned)a->cfg.timeout,
        .header_timeout_s = (unsigned)a->cfg.header_timeout,
        .max_header_bytes = (size_t)a->cfg.max_header_bytes,
        .max_streams_per_ip = (unsigned)streams_per_ip(&a->cfg),
        .authorize = auth_http_check,
        .authorize_ctx = s->guard,
    };
    if (http_server_start(&s->srv, &hc, s->router, a, err) != GT_OK) {
        log_msg(LOG_ERROR, "startup", "error=\"%s\"", err->message);
        return 0;
    }
    if (a->cfg.admin_listen[0] &&
        admin_start(a, &hc, &s->admin_router, &s->admin, err) != GT_OK) {
        log_msg(LOG_ERROR, "startup", "error=\"admin: %s\"", err->message);
        return 0;
    }
    a->srv = s->srv;
    /* Tests and scripts read the bound port from this line (--listen :0). */
    int v6 = strchr(s->host, ':') != NULL;
    log_msg(LOG_INFO, "listening", "addr=%s%s%s:%d threads=%ld max_body_bytes=%ld role=%s",
            v6 ? "[" : "", s->host, v6 ? "]" : "", http_server_port(s->srv), a->cfg.threads,
            a->cfg.max_body_bytes, a->cfg.role);
    if (!s->sampler && !a->slurm_why[0]) {
        if (!a->cfg.slurm_report_url[0])
            slurm_settings(a, s->host, http_server_port(s->srv), &s->sc);
        if (slurm_start(&a->slurm, a->cfg.db, &s->sc, err) != GT_OK) {
            log_msg(LOG_ERROR, "startup", "error=\"slurm: %s\"", err->message);
            http_server_quiesce(s->srv);
            return 0;
        }
        log_msg(LOG_INFO, "slurm", "available=1 report_url=%s job_dir=%s", s->sc.report_url,
                s->sc.job_dir);
    }
    /* A replica loads its models while HTTP answers (/readyz: 503 and how
     * far it is); a file that fails the checks stops it, as giant import
     * would refuse it: a replica never serves part of what it was given. */
    if (a->replica) {
        if (replica_load(a->replica, a->db, (size_t)a->cfg.max_model_bytes, err) != GT_OK) {
            log_msg(LOG_ERROR, "startup", "error=\"%s\"", err->message);
            http_server_quiesce(s->srv);
            return 0;
        }
        log_msg(LOG_INFO, "ready", "role=sampler models_dir=%s model_url=%s", a->cfg.models,
                a->cfg.model_url);
    }
    return 1;
}

/* Serves until SIGTERM or SIGINT, then stops accepting, stops the workers
 * that would start more work, and lets the requests in flight finish. */
static void serve_until_stopped(serve *s, const sigset_t *sigs, int *stops_seen)
{
    app *a = &s->a;
    int sig = stop_wait(sigs, stops_seen, -1);
    /* Stop accepting first, then log: once this line is out, new
     * connections are refused (tests rely on that order). */
    http_server_quiesce(s->srv);
    http_server_quiesce(s->admin);     /* /readyz says draining there too */
    atomic_store(&a->stopping, 1);     /* event streams end at their next poll */
    log_msg(LOG_INFO, "shutdown", "signal=%d in_flight=%d", sig,
            http_server_in_flight(s->srv));
    /* Training stops at its next step and the run goes back to the queue;
     * queued sample requests still get their showers while draining. */
    sched_stop(a->sched);
    a->sched = NULL;
    /* Slurm jobs go on on the cluster; the next start follows them. */
    slurm_stop(a->slurm);
    a->slurm = NULL;
    /* An evaluation stops at its next chunk and goes back to the queue. */
    evaluations_worker_stop(a->evaluations);
    a->evaluations = NULL;
    int left = drain(s->srv, sigs, stops_seen, a->cfg.shutdown_grace);
    if (left)
        log_msg(LOG_WARN, "shutdown", "abandoned=%d", left);
}

/* Lets go of everything in the order it must go, whatever was started;
 * returns status, or 1 when the database does not close cleanly. */
static int serve_free(serve *s, int status)
{
    app *a = &s->a;
    gt_error err = {0};
    /* Resumes every suspended request (failing the queued ones) before
     * the daemon stops, as MHD requires. */
    evaluations_worker_stop(a->evaluations);   /* it submits to the sampling worker */
    sampling_stop(a->sampling);
    a->sampling = NULL;
    http_server_free(s->srv);      /* joins the pool: no handler runs past here */
    http_server_free(s->admin);
    sched_stop(a->sched);
    slurm_stop(a->slurm);
    ingest_close(a->ingest);
    datasets_worker_stop(a->datasets);
    http_router_free(s->router);
    http_router_free(s->admin_router);
    auth_guard_free(s->guard);
    replica_free(a->replica);
    if (store_close(a->db, &err) != GT_OK) {
        log_msg(LOG_ERROR, "shutdown", "error=\"%s\"", err.message);
        status = 1;
    }
    if (status == 0)
        log_msg(LOG_INFO, "stopped", "clean=1");
    return status;
}

int cmd_serve(int argc, char **argv)
{
    static const char usage[] = "usage: giant serve [options]\n\n"
                                "Runs the HTTP service until SIGTERM or SIGINT.";
    /* A client that hangs up mid-reply must not kill the process. */
    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    if (stop_signals_install(&sigs) != 0) {
        fprintf(stderr, "giant serve: cannot set up the stop signals: %s\n", strerror(errno));
        return 1;
    }
    int stops_seen = 0;

    serve s;
    memset(&s, 0, sizeof s);
    gt_error err = { 0 };
    int help = 0;
    if (settings_load(&s.a.cfg, argc - 1, argv + 1, &help, &err) != GT_OK) {
        fprintf(stderr, "giant serve: %s\n", err.message);
        return 2;
    }
    if (help) {
        settings_print_help(usage, stdout);
        return 0;
    }
    log_set_level((log_level)log_parse_level(s.a.cfg.log_level));
    s.sampler = strcmp(s.a.cfg.role, "sampler") == 0;
    if (!open_database(&s, &err))
        return serve_free(&s, 1);
    settings_split_listen(s.a.cfg.listen, s.host, sizeof s.host, &s.port, NULL);
    if (!token_policy(&s.a, s.host, &s.guard))
        return serve_free(&s, 1);
    engine_init(&s.a);
    if (!start_workers(&s, &err) || !start_http(&s, &err))
        return serve_free(&s, 1);
    serve_until_stopped(&s, &sigs, &stops_seen);
    return serve_free(&s, 0);
}
