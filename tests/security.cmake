# Security probes (SECURITY.md's probe table): each attack run for real inside
# `sandboxd run` by build/helpers/probe, with outcome and host-side checks.
add_test(NAME security/probes
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/security/test_probes.py)
set_tests_properties(security/probes PROPERTIES
  ENVIRONMENT "SANDBOXD=$<TARGET_FILE:sandboxd>;SBX_HELPERS=${CMAKE_BINARY_DIR}/helpers"
  TIMEOUT 600)
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/security_net.cmake)
  include(${CMAKE_CURRENT_SOURCE_DIR}/security_net.cmake)
endif()
# Probes 21-23 against a real `sandboxd serve`: another clone's workspace, the
# file API's paths and planted symlinks, names with .., / and NUL.
add_test(NAME security/api_probes
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/security/test_api_probes.py)
set_tests_properties(security/api_probes PROPERTIES
  ENVIRONMENT "SANDBOXD=$<TARGET_FILE:sandboxd>;SBX_HELPERS=${CMAKE_BINARY_DIR}/helpers"
  TIMEOUT 600)
# The same with the warm pool on: clones' tasks in sandboxes pooled for any
# clone, their workspaces attached as idmapped mounts.
add_test(NAME security/api_probes_pool
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/security/test_api_probes.py)
set_tests_properties(security/api_probes_pool PROPERTIES
  ENVIRONMENT "SANDBOXD=$<TARGET_FILE:sandboxd>;SBX_HELPERS=${CMAKE_BINARY_DIR}/helpers;SBX_PROBES_POOL=1"
  TIMEOUT 600)
# The in-sandbox probes in sandboxes pooled for any clone (serve, default
# pool): attach, moved mounts and limits written at take.
add_test(NAME security/pool_probes
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/security/test_pool_probes.py)
set_tests_properties(security/pool_probes PROPERTIES
  ENVIRONMENT "SANDBOXD=$<TARGET_FILE:sandboxd>;SBX_HELPERS=${CMAKE_BINARY_DIR}/helpers"
  TIMEOUT 600)
