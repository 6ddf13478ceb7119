/* libFuzzer target: SKILL.md front matter (skills/skillmd.c). Any input must
 * give either a parsed object or an EINVAL with a reason; never a crash, a
 * leak or a hang. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "skills/skillmd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sbx_err e = {0};
    json_t *o = sbx_skillmd_parse((const char *)data, size, &e);
    if (o) {
        if (!json_is_string(json_object_get(o, "name")) ||
            !json_is_string(json_object_get(o, "description")))
            __builtin_trap(); /* required fields are always there */
        json_decref(o);
    } else if (e.errnum != EINVAL && e.errnum != ENOMEM) {
        __builtin_trap();
    }
    return 0;
}
