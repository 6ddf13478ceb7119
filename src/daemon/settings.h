/* The runtime's settings from the daemon's configuration. */
#pragma once

#include "daemon/config.h"
#include "runtime/settings.h"

/* Fill s from c. s borrows c's strings and arrays: c must outlive every
 * runtime made with s (the daemon frees its configuration last). */
void sbx_settings_from_config(struct sbx_runtime_settings *s, const struct sbx_config *c);
