# gpucompute_test(NAME SOURCES ... LIBS ... LABELS label)
# A GoogleTest executable registered with CTest. Label `gpu` marks tests that
# need a CUDA device (they skip with a visible message when none is present).
function(gpucompute_test name)
  cmake_parse_arguments(T "" "LABELS" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${T_LABELS}")
endfunction()
