/* docs/openapi.json, served as it is by GET /openapi.json. */
    .section .rodata
    .globl sbx_openapi_json
    .type sbx_openapi_json, @object
sbx_openapi_json:
    .incbin SBX_OPENAPI_JSON
    .globl sbx_openapi_json_end
sbx_openapi_json_end:
    .section .note.GNU-stack,"",@progbits
