/* giant_test_server: the giant binary plus the test-only routes. Used by
 * test_serve; never installed or shipped. */
#include "commands.h"
#include "test_routes.h"

int main(int argc, char **argv)
{
    cmd_serve_set_extra_routes(test_routes_add);
    return commands_dispatch(argc, argv);
}
