/* execd's files API for one OpenSandbox sandbox: paths inside its own view
 * (/workspace), resolved in its clone's workspace by workspace/files.c. */
#include "api/opensandbox/os_int.h"

int os_files_routes(sbx_http_server *srv, struct os_state *os, sbx_err *err)
{
    return 0;
}
