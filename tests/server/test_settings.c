/* settings: defaults (also as settings_default and settings_env_or_default
 * give them to the offline commands), each source, precedence flags > env >
 * file > default, and refusal of bad values with the source named. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"

static int load(settings *s, gt_error *err, int argc, char **argv)
{
    int help = 0;
    gt_error_clear(err);
    return settings_load(s, argc, argv, &help, err);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

int main(void)
{
    settings s;
    gt_error err;
    const char *vars[] = { "GIANT_LISTEN", "GIANT_DB", "GIANT_DATA_DIR", "GIANT_CONFIG",
                           "GIANT_THREADS", "GIANT_MAX_BODY_BYTES", "GIANT_LOG_LEVEL",
                           "GIANT_REQUIRE_TOKENS", "GIANT_PUBLIC_METRICS", "GIANT_RATE_LIMIT",
                           "GIANT_RATE_BURST", "GIANT_MAX_QUEUED_RUNS_PER_TOKEN", "GIANT_ROLE", "GIANT_MODELS" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);

    /* Defaults. */
    CHECK_EQ_INT(load(&s, &err, 0, NULL), GT_OK);
    CHECK(strcmp(s.listen, "127.0.0.1:8080") == 0);
    CHECK(strcmp(s.db, "giant.db") == 0);
    CHECK(strcmp(s.data_dir, "giant-data") == 0);
    CHECK(strcmp(s.config, "") == 0);
    CHECK_EQ_INT(s.threads, 4);
    CHECK_EQ_INT(s.max_body_bytes, 1048576);

    /* The one table's defaults, as the offline commands read them. */
    CHECK(settings_default("db") && strcmp(settings_default("db"), s.db) == 0);
    CHECK(settings_default("data_dir") && strcmp(settings_default("data_dir"), s.data_dir) == 0);
    CHECK(settings_default("listen") && strcmp(settings_default("listen"), s.listen) == 0);
    CHECK(settings_default("threads") && strcmp(settings_default("threads"), "4") == 0);
    CHECK(settings_default("no_such_setting") == NULL);
    CHECK(settings_env_or_default("no_such_setting") == NULL);
    CHECK(strcmp(settings_env_or_default("db"), "giant.db") == 0);
    setenv("GIANT_DB", "from-env.db", 1);
    CHECK(strcmp(settings_env_or_default("db"), "from-env.db") == 0);
    unsetenv("GIANT_DB");

    /* Each layer overrides the one below. */
    write_file("settings-test.json",
               "{\"threads\": 3, \"db\": \"file.db\", \"data_dir\": \"file-data\","
               " \"max_body_bytes\": 2048}");
    char *with_config[] = { "--config", "settings-test.json" };
    CHECK_EQ_INT(load(&s, &err, 2, with_config), GT_OK);
    CHECK_EQ_INT(s.threads, 3);
    CHECK(strcmp(s.db, "file.db") == 0);
    CHECK_EQ_INT(s.max_body_bytes, 2048);

    setenv("GIANT_THREADS", "5", 1);
    setenv("GIANT_DB", "env.db", 1);
    CHECK_EQ_INT(load(&s, &err, 2, with_config), GT_OK);
    CHECK_EQ_INT(s.threads, 5);
    CHECK(strcmp(s.db, "env.db") == 0);
    CHECK(strcmp(s.data_dir, "file-data") == 0);

    char *flags[] = { "--config", "settings-test.json", "--threads", "7", "--db=flag.db",
                      "--listen", "[::1]:0" };
    CHECK_EQ_INT(load(&s, &err, 7, flags), GT_OK);
    CHECK_EQ_INT(s.threads, 7);
    CHECK(strcmp(s.db, "flag.db") == 0);
    CHECK(strcmp(s.listen, "[::1]:0") == 0);
    CHECK_EQ_INT(s.max_body_bytes, 2048);

    /* The token settings: defaults, env, flags, range. */
    CHECK_EQ_INT(load(&s, &err, 0, NULL), GT_OK);
    CHECK(s.require_tokens == 0 && s.public_metrics == 1 && s.rate_limit == 600 &&
          s.rate_burst == 120 && s.max_queued_runs_per_token == 16);
    setenv("GIANT_REQUIRE_TOKENS", "1", 1);
    char *tok_flags[] = { "--public-metrics", "0", "--rate-limit", "0", "--rate-burst=5" };
    CHECK_EQ_INT(load(&s, &err, 5, tok_flags), GT_OK);
    CHECK(s.require_tokens == 1 && s.public_metrics == 0 && s.rate_limit == 0 &&
          s.rate_burst == 5);
    unsetenv("GIANT_REQUIRE_TOKENS");
    char *tok_bad[] = { "--require-tokens", "2" };
    CHECK_EQ_INT(load(&s, &err, 2, tok_bad), GT_EINVAL);
    char *burst_bad[] = { "--rate-burst", "0" };
    CHECK_EQ_INT(load(&s, &err, 2, burst_bad), GT_EINVAL);

    /* The connection settings: defaults, env, flags, cross-checks. */
    CHECK_EQ_INT(load(&s, &err, 0, NULL), GT_OK);
    CHECK(s.header_timeout == 10 && s.max_header_bytes == 16384 && s.admin_listen[0] == '\0');
    setenv("GIANT_HEADER_TIMEOUT", "3", 1);
    char *conn_flags[] = { "--admin-listen", "127.0.0.1:0", "--max-header-bytes", "8192" };
    CHECK_EQ_INT(load(&s, &err, 4, conn_flags), GT_OK);
    CHECK(s.header_timeout == 3 && s.max_header_bytes == 8192 &&
          strcmp(s.admin_listen, "127.0.0.1:0") == 0);
    unsetenv("GIANT_HEADER_TIMEOUT");
    char *admin_bad[] = { "--admin-listen", "localhost" };
    CHECK_EQ_INT(load(&s, &err, 2, admin_bad), GT_EINVAL);
    CHECK_MSG(strstr(err.message, "admin_listen") != NULL, "%s", err.message);
    /* Headers under the limit must fit the connection's memory with room. */
    char *header_bad[] = { "--max-header-bytes", "65536", "--connection-memory", "131072" };
    CHECK_EQ_INT(load(&s, &err, 4, header_bad), GT_EINVAL);
    CHECK_MSG(strstr(err.message, "max_header_bytes") != NULL, "%s", err.message);
    /* The role: trainer by default; a sampler needs its models directory,
     * from any source; a trainer refuses one. */
    CHECK_EQ_INT(load(&s, &err, 0, NULL), GT_OK);
    CHECK(strcmp(s.role, "trainer") == 0 && s.models[0] == '\0');
    char *sampler_bare[] = { "--role", "sampler" };
    CHECK_EQ_INT(load(&s, &err, 2, sampler_bare), GT_EINVAL);
    CHECK(strstr(err.message, "--models") != NULL);
    setenv("GIANT_MODELS", "env-models", 1);
    CHECK_EQ_INT(load(&s, &err, 2, sampler_bare), GT_OK);
    CHECK(strcmp(s.role, "sampler") == 0 && strcmp(s.models, "env-models") == 0);
    char *sampler_flag[] = { "--role", "sampler", "--models", "flag-models" };
    CHECK_EQ_INT(load(&s, &err, 4, sampler_flag), GT_OK);
    CHECK(strcmp(s.models, "flag-models") == 0);
    CHECK_EQ_INT(load(&s, &err, 0, NULL), GT_EINVAL);      /* a trainer with --models */
    unsetenv("GIANT_MODELS");
    char *sampler_url[] = { "--role", "sampler", "--model-url",
                            "http://127.0.0.1:1/v1/runs/1/model" };
    CHECK_EQ_INT(load(&s, &err, 4, sampler_url), GT_OK);
    char *trainer_url[] = { "--model-url", "http://127.0.0.1:1/v1/runs/1/model" };
    CHECK_EQ_INT(load(&s, &err, 2, trainer_url), GT_EINVAL);
    /* --token-file: a sampler's, flag over environment; a trainer refuses it */
    setenv("GIANT_TOKEN_FILE", "env-tokens", 1);
    CHECK_EQ_INT(load(&s, &err, 4, sampler_url), GT_OK);
    CHECK(strcmp(s.token_file, "env-tokens") == 0);
    char *sampler_tokens[] = { "--role", "sampler", "--model-url",
                               "http://127.0.0.1:1/v1/runs/1/model", "--token-file", "flag-tokens" };
    CHECK_EQ_INT(load(&s, &err, 6, sampler_tokens), GT_OK);
    CHECK(strcmp(s.token_file, "flag-tokens") == 0);
    CHECK_EQ_INT(load(&s, &err, 0, NULL), GT_EINVAL);      /* a trainer with a token file */
    CHECK_MSG(strstr(err.message, "token_file") != NULL, "%s", err.message);
    unsetenv("GIANT_TOKEN_FILE");
    char *role_bad[] = { "--role", "replica" };
    CHECK_EQ_INT(load(&s, &err, 2, role_bad), GT_EINVAL);

    /* GIANT_CONFIG names the file too. */
    unsetenv("GIANT_THREADS");
    unsetenv("GIANT_DB");
    setenv("GIANT_CONFIG", "settings-test.json", 1);
    CHECK_EQ_INT(load(&s, &err, 0, NULL), GT_OK);
    CHECK_EQ_INT(s.threads, 3);
    unsetenv("GIANT_CONFIG");

    /* --help is reported, not an error. */
    int help = 0;
    char *h[] = { "--help" };
    CHECK_EQ_INT(settings_load(&s, 1, h, &help, &err), GT_OK);
    CHECK_EQ_INT(help, 1);

    /* Bad input: the message names where the value came from. */
    static const struct {
        const char *flag, *value;   /* value NULL: the flag alone          */
        const char *message;        /* in the error, when not NULL          */
    } bad[] = {
        { "--threads", "four", "--threads" },
        { "--threads", "0", NULL },
        { "--max-body-bytes", "99999999999999999999", NULL },
        { "--db", NULL, "needs a value" },
        { "--frobnicate", "1", NULL },
        { "--dbx", "1", NULL },
        { "--log-level", "loud", NULL },
        { "--db", "", NULL },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = { (char *)bad[i].flag, (char *)bad[i].value };
        CHECK_MSG(load(&s, &err, bad[i].value ? 2 : 1, argv) == GT_EINVAL, "%s %s accepted",
                  bad[i].flag, bad[i].value ? bad[i].value : "");
        if (bad[i].message)
            CHECK_MSG(strstr(err.message, bad[i].message) != NULL, "%s %s: %s", bad[i].flag,
                      bad[i].value ? bad[i].value : "", err.message);
    }
    const char *bad_listens[] = { "8080", ":8080", "host:", "host:65536", "host:-1",
                                  "::1:80", "[::1:80", "host:80x" };
    for (size_t i = 0; i < sizeof bad_listens / sizeof bad_listens[0]; i++) {
        char *l[] = { "--listen", (char *)bad_listens[i] };
        CHECK_MSG(load(&s, &err, 2, l) == GT_EINVAL, "%s accepted", bad_listens[i]);
    }
    char longv[2000];
    memset(longv, 'a', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    char *too_long[] = { "--db", longv };
    CHECK_EQ_INT(load(&s, &err, 2, too_long), GT_EINVAL);

    setenv("GIANT_THREADS", "-3", 1);
    CHECK_EQ_INT(load(&s, &err, 0, NULL), GT_EINVAL);
    CHECK(strstr(err.message, "GIANT_THREADS") != NULL);
    unsetenv("GIANT_THREADS");

    char *cfg[] = { "--config", "settings-test.json" };
    write_file("settings-test.json", "{\"threads\": 2,\n \"threads\": 3}");
    CHECK_EQ_INT(load(&s, &err, 2, cfg), GT_EINVAL);       /* duplicate key */
    write_file("settings-test.json", "{\"threads\": \n}");
    CHECK_EQ_INT(load(&s, &err, 2, cfg), GT_EINVAL);
    CHECK_MSG(strstr(err.message, "line 2") != NULL, "%s", err.message);
    write_file("settings-test.json", "{\"thread\": 2}");
    CHECK_EQ_INT(load(&s, &err, 2, cfg), GT_EINVAL);
    CHECK(strstr(err.message, "unknown setting") != NULL);
    write_file("settings-test.json", "{\"threads\": \"2\"}");
    CHECK_EQ_INT(load(&s, &err, 2, cfg), GT_EINVAL);
    write_file("settings-test.json", "{\"config\": \"other.json\"}");
    CHECK_EQ_INT(load(&s, &err, 2, cfg), GT_EINVAL);
    write_file("settings-test.json", "[1, 2]");
    CHECK_EQ_INT(load(&s, &err, 2, cfg), GT_EINVAL);
    char *nofile[] = { "--config", "does-not-exist.json" };
    CHECK_EQ_INT(load(&s, &err, 2, nofile), GT_EIO);
    remove("settings-test.json");

    char host[64];
    int port = -1;
    CHECK_EQ_INT(settings_split_listen("[::1]:9000", host, sizeof host, &port, &err), GT_OK);
    CHECK(strcmp(host, "::1") == 0 && port == 9000);
    CHECK_EQ_INT(settings_split_listen("0.0.0.0:0", host, sizeof host, &port, &err), GT_OK);
    CHECK(strcmp(host, "0.0.0.0") == 0 && port == 0);
    return check_finish();
}
