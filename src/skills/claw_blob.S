/* The claw-skill program (src/skills/client/, static, musl) embedded in sandboxd. */
    .section .rodata
    .balign 16
    .globl sbx_claw_blob
    .type sbx_claw_blob, @object
sbx_claw_blob:
    .incbin SBX_CLAW_BIN
    .globl sbx_claw_blob_end
sbx_claw_blob_end:
    .section .note.GNU-stack,"",@progbits
