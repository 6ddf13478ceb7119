# Integration tests: the real sandboxd driven as a user would drive it.
file(GLOB SBX_INTEGRATION CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_*.py)
foreach(script ${SBX_INTEGRATION})
  get_filename_component(name ${script} NAME_WE)
  add_test(NAME integration/${name} COMMAND python3 ${script})
  set_tests_properties(integration/${name} PROPERTIES TIMEOUT 600
    ENVIRONMENT "SANDBOXD=$<TARGET_FILE:sandboxd>;SBX_HELPERS=${CMAKE_BINARY_DIR}/helpers")
endforeach()
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/security.cmake)
  include(${CMAKE_CURRENT_SOURCE_DIR}/security.cmake)
endif()
