# KILN_FUZZ: builds fuzz/ (its own project, compiled by clang with libFuzzer and sanitizers)
# against this build's libkiln.so, and runs each fuzz target for KILN_FUZZ_SECONDS under ctest.
# On by default when clang++ can link a libFuzzer program (Debian: clang, libclang-rt-14-dev).
if(NOT DEFINED KILN_FUZZ)
  find_program(KILN_FUZZ_CXX NAMES clang++ clang++-16 clang++-14)
  set(probe_dir ${PROJECT_BINARY_DIR}/fuzz_probe)
  set(probe_rc 1)
  if(KILN_FUZZ_CXX)
    file(WRITE ${probe_dir}/probe.cc "#include <cstddef>\n#include <cstdint>\nextern \"C\" int "
                                     "LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
    execute_process(COMMAND ${KILN_FUZZ_CXX} -fsanitize=fuzzer,address probe.cc -o probe
                    WORKING_DIRECTORY ${probe_dir} RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
  endif()
  if(probe_rc EQUAL 0)
    set(fuzz_default ON)
  else()
    set(fuzz_default OFF)
    message(STATUS "Kiln: fuzz targets off (no clang++ able to link -fsanitize=fuzzer)")
  endif()
  option(KILN_FUZZ "Build the libFuzzer targets in fuzz/ with clang and run them in ctest"
         ${fuzz_default})
endif()
set(KILN_FUZZ_SECONDS 10 CACHE STRING "How long ctest runs each fuzz target")
if(NOT KILN_FUZZ)
  return()
endif()
find_program(KILN_FUZZ_CXX NAMES clang++ clang++-16 clang++-14 REQUIRED)

include(ExternalProject)
ExternalProject_Add(kiln_fuzz
  SOURCE_DIR ${PROJECT_SOURCE_DIR}/fuzz
  BINARY_DIR ${PROJECT_BINARY_DIR}/fuzz
  CMAKE_ARGS -DCMAKE_CXX_COMPILER=${KILN_FUZZ_CXX} -DKILN_BUILD_DIR=${PROJECT_BINARY_DIR}
             -DKILN_LIBRARY=$<TARGET_FILE:kiln>
  INSTALL_COMMAND ""
  BUILD_ALWAYS ON
  DEPENDS kiln)

if(KILN_BUILD_TESTS)
  include(${PROJECT_SOURCE_DIR}/fuzz/targets.cmake)
  foreach(target ${KILN_FUZZ_TARGETS})
    add_test(NAME fuzz_${target}
      COMMAND bash ${PROJECT_SOURCE_DIR}/fuzz/run_fuzzer.sh
              ${PROJECT_BINARY_DIR}/fuzz/${target}_fuzzer ${PROJECT_SOURCE_DIR}/fuzz/corpus/${target}
              ${PROJECT_BINARY_DIR}/fuzz/work/${target} ${KILN_FUZZ_SECONDS})
    set_tests_properties(fuzz_${target} PROPERTIES TIMEOUT 300 LABELS fuzz)
  endforeach()
endif()
