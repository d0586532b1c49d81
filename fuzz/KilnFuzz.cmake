# KILN_FUZZ: builds fuzz/ (its own project, compiled by clang with libFuzzer and sanitizers)
# against this build's libkiln.so, and runs each fuzz target for KILN_FUZZ_SECONDS under ctest.
# Unset, it is on where clang++ can link a libFuzzer program (Debian: clang, libclang-rt-14-dev;
# scripts/install_deps.sh installs them) and off, with a note, where it cannot; but in CI
# (the environment variable CI set to true) the fuzz targets must build, so a failed probe is a
# configure error there, as it is with an explicit -DKILN_FUZZ=ON. -DKILN_FUZZ=OFF skips them.

# Sets KILN_FUZZ_PROBE_ERROR to why clang++ cannot link a libFuzzer program with the sanitizers
# fuzz/ uses, or to "" when it can. A success is remembered; a failure is probed again.
function(kiln_fuzz_probe)
  find_program(KILN_FUZZ_CXX NAMES clang++ clang++-16 clang++-14)
  if(NOT KILN_FUZZ_CXX)
    set(KILN_FUZZ_PROBE_ERROR "no clang++ found" PARENT_SCOPE)
    return()
  endif()
  if(KILN_FUZZ_PROBED STREQUAL KILN_FUZZ_CXX)
    set(KILN_FUZZ_PROBE_ERROR "" PARENT_SCOPE)
    return()
  endif()
  set(probe_dir ${PROJECT_BINARY_DIR}/fuzz_probe)
  file(WRITE ${probe_dir}/probe.cc "#include <cstddef>\n#include <cstdint>\nextern \"C\" int "
                                   "LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND ${KILN_FUZZ_CXX} -fsanitize=fuzzer,address,undefined probe.cc -o probe
                  WORKING_DIRECTORY ${probe_dir} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE out)
  if(rc EQUAL 0)
    set(KILN_FUZZ_PROBED ${KILN_FUZZ_CXX} CACHE INTERNAL "The clang++ that linked the fuzz probe")
    set(KILN_FUZZ_PROBE_ERROR "" PARENT_SCOPE)
  else()
    string(STRIP "${out}" out)
    set(KILN_FUZZ_PROBE_ERROR
        "${KILN_FUZZ_CXX} cannot link -fsanitize=fuzzer,address,undefined (${rc}):\n${out}"
        PARENT_SCOPE)
  endif()
endfunction()

if(NOT DEFINED KILN_FUZZ OR KILN_FUZZ)
  kiln_fuzz_probe()
  set(in_ci "$ENV{CI}")
  if(KILN_FUZZ_PROBE_ERROR STREQUAL "")
    set(KILN_FUZZ ON)
  elseif(DEFINED KILN_FUZZ OR in_ci)
    message(FATAL_ERROR
      "Kiln: the fuzz targets cannot be built: ${KILN_FUZZ_PROBE_ERROR}\n"
      "Install clang and libclang-rt-14-dev (scripts/install_deps.sh), or configure with "
      "-DKILN_FUZZ=OFF to build without them.")
  else()
    message(STATUS "Kiln: fuzz targets off (no clang++ able to link -fsanitize=fuzzer; "
                   "install clang and libclang-rt-14-dev to build them)")
    set(KILN_FUZZ OFF)
  endif()
endif()
set(KILN_FUZZ_SECONDS 10 CACHE STRING "How long ctest runs each fuzz target")
if(NOT KILN_FUZZ)
  return()
endif()

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
