# The cgroup v2 path, for real: Debian 12's kernel booted in qemu with a
# cgroup v2-only hierarchy (tests/vm/run.py), this build's sandboxd inside.
add_test(NAME vm/cgroup_v2 COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/vm/run.py --timeout 840)
set_tests_properties(vm/cgroup_v2 PROPERTIES TIMEOUT 900
  ENVIRONMENT "SANDBOXD=$<TARGET_FILE:sandboxd>;SBX_HELPERS=${CMAKE_BINARY_DIR}/helpers")
