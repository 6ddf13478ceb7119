# Network probes (SECURITY.md 16-20), run in the isolated lab of
# integration/netlab.py (sandboxd inside a namespace with no route out), and the
# lab's own self-test. Included from security.cmake.
add_test(NAME security/net_probes
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/security/test_net_probes.py)
add_test(NAME integration/netlab
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/integration/netlab.py)
set_tests_properties(security/net_probes integration/netlab PROPERTIES
  ENVIRONMENT "SANDBOXD=$<TARGET_FILE:sandboxd>;SBX_HELPERS=${CMAKE_BINARY_DIR}/helpers"
  TIMEOUT 600)
