/* cmd_train_dist: data-parallel `giant train` (cmd_train_dist.h).
 *
 * The launcher (`--ranks N` on the CPU, `--gpus N` on GPUs) is the process
 * the user started: it has recorded the run, and now starts N copies of
 * this binary as `giant train --resume RUN`, each told its rank by the
 * environment (GIANT_RANK, GIANT_WORLD_SIZE, GIANT_LOCAL_RANK, and
 * GIANT_DIST / GIANT_DIST_ID: which collectives and where to meet), waits
 * for them, and cleans up.  Why exec and not fork alone: a forked child of
 * a process that has touched CUDA or started OpenMP threads cannot use
 * them; a fresh image can.  Rank 0 records the run exactly as a one-process
 * `giant train` does; the others train and record nothing.
 *
 * When a rank fails, the launcher aborts the group (shm: the flag every
 * waiting rank checks; NCCL: SIGTERM, then SIGKILL after 10 s, since a
 * rank stuck in an NCCL collective with a dead peer may never return), and
 * when rank 0 did not get to record the failure itself, records it. */
#include "cmd_train_dist.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gt_clock.h"
#include "model_run.h"
#include "runs.h"
#include "store.h"
#ifdef GIANT_HAVE_CUDA
#include "cuda_devices.h"
#endif

int cmd_train_gpu_count(void)
{
#ifdef GIANT_HAVE_CUDA
    gt_device_info d[DIST_MAX_RANKS];
    int n = 0;
    gt_error err;
    if (cuda_devices_query(d, DIST_MAX_RANKS, &n, &err) != GT_OK)
        return 0;
    return n;
#else
    return 0;
#endif
}

void cmd_train_rank_device(const model_config *cfg, const dist_env *e, char *out, size_t cap)
{
    out[0] = '\0';
    if (e->size <= 1 || strcmp(cfg->device, "cpu") == 0)
        return;
    /* srun --gpus-per-task=1 leaves each task one visible device: cuda:0 */
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && vis[0] && !strchr(vis, ','))
        snprintf(out, cap, "cuda:0");
    else
        snprintf(out, cap, "cuda:%d", e->local_rank);
}

static volatile sig_atomic_t launcher_term;

static void on_launcher_term(int sig)
{
    (void)sig;
    launcher_term = 1;
}

/* The child between fork and exec: its rank in the environment, the
 * default signal dispositions, the same binary. */
static void exec_rank(const cmd_train_spawn *t, int rank, const char *kind, const char *id)
{
    char v[32], runs[32], dev[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("GIANT_RANK", v, 1);
    setenv("GIANT_LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", t->n);
    setenv("GIANT_WORLD_SIZE", v, 1);
    setenv("GIANT_DIST", kind, 1);
    setenv("GIANT_DIST_ID", id, 1);
    if (!t->gpus && !getenv("OMP_NUM_THREADS")) {
        /* N processes share the cores: no more OpenMP threads than cores */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long per = cores > t->n ? cores / t->n : 1;
        snprintf(v, sizeof v, "%ld", per);
        setenv("OMP_NUM_THREADS", v, 1);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    snprintf(runs, sizeof runs, "%lld", (long long)t->run);
    const char *argv[20];
    int k = 0;
    argv[k++] = "giant";
    argv[k++] = "train";
    if (t->report_url && rank == 0) {
        /* rank 0 reports to the service, from the start reply the
         * launcher got; the others train the config and report nothing */
        argv[k++] = "--report";
        argv[k++] = t->report_url;
        argv[k++] = "--run";
        argv[k++] = runs;
        argv[k++] = "--start-file";
        argv[k++] = t->start_file;
    } else if (t->report_url) {
        argv[k++] = t->config_file;
    } else {
        argv[k++] = "--resume";
        argv[k++] = runs;
        argv[k++] = "--db";
        argv[k++] = t->db_path;
    }
    argv[k++] = "--data-dir";
    argv[k++] = t->data_dir;
    if (t->gpus) {
        snprintf(dev, sizeof dev, "cuda:%d", rank);
        argv[k++] = "--device";
        argv[k++] = dev;
    } else if (t->device && t->device[0]) {
        argv[k++] = "--device";
        argv[k++] = t->device;
    }
    if (t->allow_emulation)
        argv[k++] = "--allow-bf16-emulation";
    if (t->quiet || rank > 0)
        argv[k++] = "--quiet";
    if (t->verbose && rank == 0)
        argv[k++] = "--verbose";
    argv[k] = NULL;
    execv("/proc/self/exe", (char *const *)argv);
    fprintf(stderr, "giant train: rank %d: exec /proc/self/exe: %s\n", rank, strerror(errno));
    _exit(127);
}

int cmd_train_spawn_ranks(cmd_train_spawn *t)
{
    t->failure[0] = '\0';
    gt_error err = {0};
    const char *kind = t->gpus ? "nccl" : "shm";
    /* dir is shorter than id, so that "dir/id" always fits */
    char id[4096] = "", dir[4000] = "";
    dist_shm_group *g = NULL;
    if (t->gpus) {
        const char *tmp = getenv("TMPDIR");
        int n = snprintf(dir, sizeof dir, "%s/giant-nccl.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (n < 0 || (size_t)n >= sizeof dir) {
            fprintf(stderr, "giant train: TMPDIR is too long for the NCCL group's folder\n");
            return 1;
        }
        if (!mkdtemp(dir)) {
            fprintf(stderr, "giant train: making %s: %s\n", dir, strerror(errno));
            return 1;
        }
        snprintf(id, sizeof id, "%s/id", dir);
    } else {
        snprintf(id, sizeof id, "/giant-train-%ld", (long)getpid());
        if (dist_shm_group_create_named(id, t->n, 0, &g, &err)) {
            fprintf(stderr, "giant train: %s\n", err.message);
            return 1;
        }
    }
    fprintf(stderr, "run %lld: %d ranks (%s)\n", (long long)t->run, t->n,
            t->gpus ? "one GPU each, NCCL" : "CPU processes, shared memory");
    pid_t pid[DIST_MAX_RANKS];
    int st[DIST_MAX_RANKS], done[DIST_MAX_RANKS];
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_launcher_term;
    /* Ctrl-C reaches every rank from the terminal: they agree to stop and
     * rank 0 records it; the launcher waits for them.  SIGTERM (from a
     * supervisor) is passed on. */
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int started = 0;
    for (int r = 0; r < t->n; r++) {
        done[r] = 0;
        st[r] = 0;
        fflush(NULL);
        pid[r] = fork();
        if (pid[r] == 0)
            exec_rank(t, r, kind, id);
        if (pid[r] < 0) {
            fprintf(stderr, "giant train: starting rank %d: %s\n", r, strerror(errno));
            break;
        }
        started++;
    }
    int failed = started < t->n ? 1 : 0, left = started, first_bad = -1;
    double kill_at = failed ? gt_clock_s() : 0;
    if (failed && g)
        dist_shm_group_abort(g);
    int termed = 0;
    while (left > 0) {
        if (launcher_term && !termed) {
            for (int r = 0; r < started; r++)
                if (!done[r])
                    kill(pid[r], SIGTERM);
            termed = 1;
        }
        int s = 0;
        pid_t p = waitpid(-1, &s, WNOHANG);
        if (p <= 0) {
            if (kill_at > 0 && gt_clock_s() > kill_at + 10.0) {
                for (int r = 0; r < started; r++)
                    if (!done[r])
                        kill(pid[r], SIGKILL);
                kill_at = 0;
            }
            struct timespec d = {0, 50 * 1000 * 1000};
            nanosleep(&d, NULL);
            continue;
        }
        for (int r = 0; r < started; r++) {
            if (pid[r] != p)
                continue;
            done[r] = 1;
            st[r] = s;
            left--;
            int ok = WIFEXITED(s) && (WEXITSTATUS(s) == 0 || WEXITSTATUS(s) == 130);
            if (!ok && !failed) {
                failed = 1;
                first_bad = r;
                if (WIFEXITED(s))
                    fprintf(stderr, "giant train: rank %d exited with status %d: stopping the "
                            "others\n", r, WEXITSTATUS(s));
                else
                    fprintf(stderr, "giant train: rank %d was killed by signal %d: stopping "
                            "the others\n", r, WIFSIGNALED(s) ? WTERMSIG(s) : 0);
                if (g)
                    dist_shm_group_abort(g);
                else
                    for (int q = 0; q < started; q++)
                        if (!done[q])
                            kill(pid[q], SIGTERM);
                kill_at = gt_clock_s();
            }
        }
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    dist_shm_group_destroy(g);
    if (dir[0]) {
        unlink(id);
        rmdir(dir);
    }
    int rank0_exited = started > 0 && WIFEXITED(st[0]);
    if (started > 0 && (!rank0_exited || first_bad > 0)) {
        /* rank 0 could not record its end, or recorded only that the group
         * was aborted: the launcher knows which rank failed first */
        store *db = NULL;
        char msg[200];
        int r = first_bad > 0 ? first_bad : 0, s0 = st[r];
        if (WIFEXITED(s0))
            snprintf(msg, sizeof msg, "rank %d of %d exited with status %d%s", r, t->n,
                     WEXITSTATUS(s0), r ? "; the others were stopped" : "");
        else
            snprintf(msg, sizeof msg, "rank %d of %d was killed by signal %d%s", r, t->n,
                     WIFSIGNALED(s0) ? WTERMSIG(s0) : 0, r ? "; the others were stopped" : "");
        snprintf(t->failure, sizeof t->failure, "%s", msg);
        if (!t->report_url && store_open(&db, t->db_path, &err) == GT_OK)
            runs_set_status(db, t->run, "failed", msg, NULL, NULL);
        store_close(db, NULL);
    }
    if (started == 0)
        return 1;
    if (rank0_exited && WEXITSTATUS(st[0]) == 130)
        return 130;
    if (failed)
        return rank0_exited && WEXITSTATUS(st[0]) != 0 ? WEXITSTATUS(st[0]) : 1;
    return rank0_exited ? WEXITSTATUS(st[0]) : 1;
}

static volatile sig_atomic_t worker_stop;

static void on_worker_signal(int sig)
{
    (void)sig;
    worker_stop = 1;
}

static int worker_should_stop(void *user)
{
    (void)user;
    return worker_stop;
}

int cmd_train_worker(const cmd_train_worker_args *a)
{
    gt_error err = {0};
    char field[128] = "";
    model_config cfg;
    int rc;
    if (a->resume) {
        /* the run's config, read once; rank 0 alone writes the database */
        store *db = NULL;
        rc = store_open(&db, a->db_path, &err);
        if (!rc)
            rc = runs_read_config(db, a->resume, &cfg, &err);
        store_close(db, NULL);
    } else {
        rc = model_config_load(a->config_path, &cfg, field, sizeof field, &err);
    }
    if (rc) {
        fprintf(stderr, "giant train: rank %d: %s\n", a->spec->rank, err.message);
        return 1;
    }
    if (a->device && a->device[0])
        snprintf(cfg.device, sizeof cfg.device, "%s", a->device);
    nn_backend *b = NULL;
    dist_comm *comm = NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_worker_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if ((rc = model_open_backend(&cfg, a->bf16, &b, &err)) ||
        (rc = dist_open(a->spec, b, &comm, &err))) {
        fprintf(stderr, "giant train: rank %d: %s\n", a->spec->rank, err.message);
        nn_backend_close(b);
        return 1;
    }
    model_run_hooks hooks;
    memset(&hooks, 0, sizeof hooks);
    hooks.should_stop = worker_should_stop;
    rc = model_run_train_dist(&cfg, b, a->data_dir, &hooks, NULL, comm, &err);
    dist_destroy(comm);
    nn_backend_close(b);
    if (rc == GT_OK)
        return 0;
    /* stopped with the group (a signal here or at another rank), or the
     * group was aborted because another rank failed, which that rank and
     * the launcher report */
    if (rc == GT_ECANCELLED)
        return 130;
    fprintf(stderr, "giant train: rank %d: %s\n", a->spec->rank, err.message);
    return 1;
}
