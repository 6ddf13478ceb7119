/* An egress flow as JSON: one shape for the audit log, the event streams and
 * `sandboxd run`'s report. (net/ has no JSON: the shape lives here.) */
#pragma once

#include <jansson.h>

#include "net/flow.h"

/* {via, name, address ("" when never resolved), port, verdict ("allow" or
 * "deny"), rule, bytesOut, bytesIn, durationSeconds}; NULL when out of
 * memory. */
json_t *sbx_flow_json(const struct sbx_flow *f);
