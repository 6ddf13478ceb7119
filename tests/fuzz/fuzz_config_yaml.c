/* libFuzzer target: the configuration file (`sandboxd serve --config`),
 * through the whole loader: libyaml, then our walk of the document
 * (daemon/config_yaml.c), the key table and value parsers, environments and
 * tenants. The input is written to a file and loaded as the daemon does.
 *
 * Beyond "no crash, no leak": a refused file always says why. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void remove_file(void)
{
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        snprintf(path, sizeof(path), "/tmp/fuzz-config-%d.yaml", (int)getpid());
        atexit(remove_file);
    }
    FILE *f = fopen(path, "we");
    assert(f);
    if (size)
        assert(fwrite(data, 1, size, f) == size);
    assert(fclose(f) == 0);
    char *argv[] = {"serve", "--config", path, NULL};
    struct sbx_config c;
    sbx_err e = {0};
    int rc = sbx_config_load(&c, 3, argv, NULL, &e);
    if (rc < 0)
        assert(e.msg[0]);
    sbx_config_free(&c);
    return 0;
}
