# gpucompute_test(NAME [SERIAL] SOURCES ... LIBS ... LABELS label)
# A GoogleTest executable registered with CTest. Label `gpu` marks tests that
# need a CUDA device (they skip with a visible message when none is present).
# SERIAL: its tests run with no other test beside them (ctest runs the rest
# in parallel): for tests that time a race or measure the process, such as
# a shutdown drain, abandoned calls or resident memory.
function(gpucompute_test name)
  cmake_parse_arguments(T "SERIAL" "LABELS" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  # CPU servers that a test starts are told the ceilings in this file, not
  # made to measure them (support/server_process.cc says why).
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${T_LABELS}" RUN_SERIAL ${T_SERIAL}
    ENVIRONMENT "GPUCOMPUTE_TEST_CEILINGS=${PROJECT_SOURCE_DIR}/tests/support/cpu_ceilings.json")
endfunction()
