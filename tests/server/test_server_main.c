/* giant_test_server: the giant binary plus the test-only routes. Used by
 * test_serve, test_http_limits and test_faults; never installed or shipped.
 * With GIANT_TEST_FAULT_VFS=1 every database it opens goes through the
 * fault-injecting VFS (fault_vfs.h), armed by POST /test/fault. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "fault_vfs.h"
#include "test_routes.h"

int main(int argc, char **argv)
{
    const char *fault = getenv("GIANT_TEST_FAULT_VFS");
    if (fault && strcmp(fault, "1") == 0 && fault_vfs_install() != 0) {
        fprintf(stderr, "giant_test_server: cannot install the fault VFS\n");
        return 1;
    }
    cmd_serve_set_extra_routes(test_routes_add);
    return commands_dispatch(argc, argv);
}
