/* The seccomp profiles' programs compiled at build time (isolate/bpfgen/),
 * in sbx_seccomp_compile_fd's layout; read by sbx_seccomp_prebuilt_fd. */
    .section .rodata
    .balign 16
    .globl sbx_seccomp_blob_default
    .type sbx_seccomp_blob_default, @object
sbx_seccomp_blob_default:
    .incbin SBX_BPF_DEFAULT
    .globl sbx_seccomp_blob_default_end
sbx_seccomp_blob_default_end:
    .balign 16
    .globl sbx_seccomp_blob_strict
    .type sbx_seccomp_blob_strict, @object
sbx_seccomp_blob_strict:
    .incbin SBX_BPF_STRICT
    .globl sbx_seccomp_blob_strict_end
sbx_seccomp_blob_strict_end:
    .section .note.GNU-stack,"",@progbits
