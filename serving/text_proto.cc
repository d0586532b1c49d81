// Text-format configuration files (serving/text_proto.h).
#include "serving/text_proto.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <fstream>
#include <sstream>

#include "kiln/error.h"

namespace kiln::serving {
namespace {

class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first.empty())
      first = "line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1) + ": " +
              message;
  }
  std::string first;
};

}  // namespace

void parse_text_proto(const std::string& text, google::protobuf::Message* message,
                      const std::string& where) {
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, message))
    throw Error(ErrorCode::kInvalidArgument,
                where + ": " + (errors.first.empty() ? "parse error" : errors.first));
}

std::string read_config_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kNotFound, what + " '" + path + "' cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace kiln::serving
