/* log: one-line structured log records on stderr.
 *
 * Every record is "ts=... level=... msg=..." followed by key=value pairs the
 * caller formats, so that a line can be grepped or parsed without a schema.
 * Lines are written with a single write(2), so records from concurrent
 * request threads never interleave. */
#ifndef LOG_H
#define LOG_H

typedef enum log_level {
    LOG_DEBUG = 0,
    LOG_INFO,
    LOG_WARN,
    LOG_ERROR,
} log_level;

/* Records below level are dropped. Default LOG_INFO. */
void log_set_level(log_level level);

/* fn(user) is called before each record that is written (NULL: none):
 * giant train clears its progress bar's line there, so a record never
 * lands in the middle of it. */
void log_set_hook(void (*fn)(void *user), void *user);

/* Parses "debug" | "info" | "warn" | "error"; returns -1 when unknown. */
int log_parse_level(const char *name);

/* Writes "ts=<UTC ISO-8601> level=<level> msg=<msg> <fmt...>\n". msg must
 * be a single word (it is the record's kind, e.g. "request"); fmt carries the
 * key=value pairs. */
void log_msg(log_level level, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
