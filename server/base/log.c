#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile int log_min = LOG_INFO;

static const char *const level_names[] = { "debug", "info", "warn", "error" };

static void (*log_hook)(void *user);
static void *log_hook_user;

void log_set_level(log_level level)
{
    log_min = level;
}

void log_set_hook(void (*fn)(void *user), void *user)
{
    log_hook = fn;
    log_hook_user = user;
}

int log_parse_level(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

void log_msg(log_level level, const char *msg, const char *fmt, ...)
{
    if ((int)level < log_min || level > LOG_ERROR)
        return;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line,
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
                     level_names[level], msg);
    if (fmt && *fmt && n > 0 && (size_t)n < sizeof line - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;        /* truncated: keep the newline */
    line[n++] = '\n';
    /* One write per record: atomic for pipes up to PIPE_BUF and in practice
     * unbroken on terminals and files. A failed log write has nowhere to go. */
    if (log_hook)
        log_hook(log_hook_user);
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
