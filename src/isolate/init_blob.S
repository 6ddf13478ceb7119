/* The init program (src/isolate/init/, static, musl) embedded in sandboxd. */
    .section .rodata
    .balign 16
    .globl sbx_init_blob
    .type sbx_init_blob, @object
sbx_init_blob:
    .incbin SBX_INIT_BIN
    .globl sbx_init_blob_end
sbx_init_blob_end:
    .section .note.GNU-stack,"",@progbits
