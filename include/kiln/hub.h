// kiln::hub: trained models by handle, as TF Hub's hub.load and hub.KerasLayer: a handle names
// an ONNX file or a Kiln saved model (io::save_model's directory), and resolves to a local path:
//
//   "file:///models/extractor.onnx", "/models/extractor", "models/extractor"   that path
//   "fashion_mnist/extractor/1"     <cache>/fashion_mnist/extractor/1 (a path that does not exist)
//   "https://host/path/model.onnx"  <cache>/host/path/model.onnx, when it is there
//
// <cache> is $KILN_HUB_CACHE, else $XDG_CACHE_HOME/kiln/hub, else ~/.cache/kiln/hub (TF Hub's
// TFHUB_CACHE_DIR). This build has no network code: an http(s) handle whose copy is not in the
// cache is kUnimplemented saying where to put the file, where TF Hub would download it.
#pragma once

#include <memory>
#include <string>

#include "kiln/io/saved_model.h"
#include "kiln/nn/graph_layer.h"
#include "kiln/onnx.h"

namespace kiln::hub {

// The cache directory handles without a path resolve under.
std::string cache_dir();
// The local path of `handle` (see above); kNotFound naming every place looked in.
std::string resolve(const std::string& handle);
// The model `handle` names, as an exported graph: an .onnx file imported with `options`, or a
// saved model's "serving_default" signature (its weights as variables).
io::ExportedGraph load(const std::string& handle, const onnx::ImportOptions& options = {});
// The model as a layer of a new model (nn::GraphLayer), its weights frozen unless `trainable`.
// An ONNX model's initializers become the layer's weights (whatever `options` says of them).
std::shared_ptr<nn::GraphLayer> layer(const std::string& handle, bool trainable = false,
                                      const onnx::ImportOptions& options = {},
                                      const std::string& name = "");

}  // namespace kiln::hub
