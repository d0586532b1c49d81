// Tensors, types and attributes to and from the saved-model protobufs (saved_model.proto): the
// writers for exported models and whole-model saves, and readers that check every field and
// report a bad one as kDataLoss naming the file.
#pragma once

#include <string>

#include "kiln/attrs.h"
#include "kiln/graph.h"
#include "kiln/tensor.h"
#include "src/api/io/proto/saved_model.pb.h"

namespace kiln::io::internal {

void set_type(proto::saved::TensorTypeDef* out, const TensorType& type);
void set_tensor(proto::saved::TensorValue* out, const Tensor& t);
void set_subgraph(proto::saved::SubGraphDef* out, const SubGraph& sub);
// `node` names the owner of the attribute in the error for a symbolic tensor.
void set_attr(proto::saved::AttrDef* out, const std::string& name, const AttrValue& value,
              const std::string& node);

// Errors about one file: kDataLoss "load_model: <file>: <what>".
struct Source {
  std::string file;
  [[noreturn]] void corrupt(const std::string& what) const;
};

DType dtype_from(int value, const Source& src, const std::string& where);
TensorType type_from(const proto::saved::TensorTypeDef& t, const Source& src,
                     const std::string& where);
Tensor tensor_from(const proto::saved::TensorValue& t, const Source& src,
                   const std::string& where);
std::shared_ptr<const SubGraph> subgraph_from(const proto::saved::SubGraphDef& def,
                                              const Source& src, const std::string& where);
Attrs attrs_from(const google::protobuf::RepeatedPtrField<proto::saved::AttrDef>& list,
                 const Source& src, const std::string& where);

}  // namespace kiln::io::internal
