# Checks that README.md quotes every README example file verbatim (run with cmake -P and
# -DSOURCE_DIR=<repository root>), so the README never shows code no test compiles.
file(READ ${SOURCE_DIR}/README.md readme)
set(quoted
  examples/readme/eager.cc examples/readme/graph.cc examples/readme/function.cc
  examples/readme/custom_op.cc
  examples/readme/train.cc examples/readme/save_load.cc examples/readme/onnx.cc
  examples/cmake_project/CMakeLists.txt)
foreach(path ${quoted})
  file(READ ${SOURCE_DIR}/${path} text)
  string(FIND "${readme}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "README.md does not quote ${path} verbatim: paste it again")
  endif()
endforeach()
message(STATUS "README.md quotes every example verbatim")
