# The fuzz targets: <name>_fuzzer.cc here, seeds in corpus/<name>/.
set(KILN_FUZZ_TARGETS tfrecord example idx checkpoint saved_model onnx lite)
