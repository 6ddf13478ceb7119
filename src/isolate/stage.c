#include "isolate/stage.h"

#include <stddef.h>

#define SBX_STAGE_NAME(e, name) [SBX_STAGE_##e] = name,
static const char *const names[SBX_STAGE_COUNT] = {SBX_STAGES(SBX_STAGE_NAME)};

const char *sbx_stage_name(enum sbx_stage s)
{
    return (unsigned)s < SBX_STAGE_COUNT ? names[s] : "setup";
}
