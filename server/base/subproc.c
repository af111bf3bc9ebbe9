#define _GNU_SOURCE   /* pipe2 */
#include "subproc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gt_array.h"

int subproc_which(const char *name, char *out, size_t cap)
{
    if (strchr(name, '/')) {
        snprintf(out, cap, "%s", name);
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        if (n > 0 && n + strlen(name) + 2 < cap) {
            snprintf(out, cap, "%.*s/%s", (int)n, path, name);
            if (access(out, X_OK) == 0)
                return 0;
        }
        path += n + (end ? 1 : 0);
    }
    return -1;
}

#define SUBPROC_KEEP (4u << 20)

typedef struct sink {
    char *buf;
    size_t len, cap;
} sink;

static void sink_add(sink *s, const char *p, size_t n)
{
    if (s->len + n > SUBPROC_KEEP)
        n = SUBPROC_KEEP - s->len;     /* the rest is read and dropped */
    if (n == 0)
        return;
    if (gt_array_reserve(&s->buf, &s->cap, s->len + n + 1, 4096) != 0)
        return;
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = '\0';
}

static char *sink_take(sink *s)
{
    if (!s->buf)
        return calloc(1, 1);
    return s->buf;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int subproc_run(char *const argv[], long timeout_ms, subproc_result *r)
{
    memset(r, 0, sizeof *r);
    r->exit_code = -1;
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    sink so = {0}, se = {0};
    if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) {
        char msg[160];
        snprintf(msg, sizeof msg, "pipe: %s", strerror(errno));
        sink_add(&se, msg, strlen(msg));
        goto fail;
    }
    char exe[4096];
    /* resolved before fork: the child only execs */
    if (subproc_which(argv[0], exe, sizeof exe)) {
        char msg[1200];
        snprintf(msg, sizeof msg, "cannot run %s: not found in PATH", argv[0]);
        sink_add(&se, msg, strlen(msg));
        goto fail;
    }
    /* fork and exec.  Between them only async-signal-safe calls: the child
     * starts with an empty signal mask and default dispositions (the
     * service blocks SIGTERM in its threads and ignores SIGPIPE; an exec
     * keeps both, and resets only the handled signals). */
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int in = open("/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(po[1], 1) < 0 || dup2(pe[1], 2) < 0)
            _exit(127);
        execv(exe, argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    if (pid < 0) {
        char msg[1200];
        snprintf(msg, sizeof msg, "cannot run %s: %s", argv[0], strerror(errno));
        sink_add(&se, msg, strlen(msg));
        goto fail;
    }
    long deadline = now_ms() + timeout_ms;
    int open_fds = 2;
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    while (open_fds > 0) {
        long left = deadline - now_ms();
        if (left <= 0) {
            kill(pid, SIGKILL);
            r->timed_out = 1;
            break;
        }
        int n = poll(fds, 2, (int)(left > 1000 ? 1000 : left));
        if (n < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2 && n > 0; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[8192];
            ssize_t got = read(fds[i].fd, buf, sizeof buf);
            if (got > 0) {
                sink_add(i ? &se : &so, buf, (size_t)got);
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            }
        }
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!r->timed_out && WIFEXITED(status))
        r->exit_code = WEXITSTATUS(status);
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0)
            close(fds[i].fd);
    r->out = sink_take(&so);
    r->err = sink_take(&se);
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    r->out = sink_take(&so);
    r->err = sink_take(&se);
    return -1;
}

void subproc_result_free(subproc_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}
