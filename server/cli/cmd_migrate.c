/* giant migrate: apply pending schema migrations and report the version. */
#include <stdio.h>

#include "commands.h"
#include "log.h"
#include "settings.h"
#include "store.h"

int cmd_migrate(int argc, char **argv)
{
    settings cfg;
    gt_error err = { 0 };
    int help = 0;
    if (settings_load(&cfg, argc - 1, argv + 1, &help, &err) != GT_OK) {
        fprintf(stderr, "giant migrate: %s\n", err.message);
        return 2;
    }
    if (help) {
        /* its own options only: the service's other settings are accepted
         * (one config file serves both) but change nothing here */
        printf("usage: giant migrate [--db FILE] [--config FILE] [--log-level LEVEL]\n\n"
               "Creates the database if missing, applies pending migrations and prints\n"
               "the schema version.\n\n"
               "options:\n"
               "  --db FILE          database (default %s, env GIANT_DB)\n"
               "  --config FILE      a JSON settings file (env GIANT_CONFIG); its db and\n"
               "                     log_level apply\n"
               "  --log-level LEVEL  debug, info, warn or error (default %s,\n"
               "                     env GIANT_LOG_LEVEL)\n",
               settings_default("db"), settings_default("log_level"));
        return 0;
    }
    log_set_level((log_level)log_parse_level(cfg.log_level));

    int applied = 0, version = 0;
    store *db = NULL;
    if (store_open_migrated(&db, cfg.db, &applied, NULL, &err) != GT_OK ||
        store_schema_version(db, &version, &err) != GT_OK) {
        fprintf(stderr, "giant migrate: %s\n", err.message);
        store_close(db, NULL);
        return 1;
    }
    if (store_close(db, &err) != GT_OK) {
        fprintf(stderr, "giant migrate: %s\n", err.message);
        return 1;
    }
    printf("%s: schema version %d (applied %d migration%s now)\n", cfg.db, version, applied,
           applied == 1 ? "" : "s");
    return 0;
}
