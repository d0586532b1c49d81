// TF Serving's configuration files are protobuf messages in text format: reading and parsing
// one, with errors that name the file and the line and column.
#pragma once

#include <string>

namespace google::protobuf {
class Message;
}

namespace kiln::serving {

// Parses `text` into `message`; throws kiln::Error (kInvalidArgument) "<where>: line L,
// column C: <what the parser says>".
void parse_text_proto(const std::string& text, google::protobuf::Message* message,
                      const std::string& where);

// The whole file; throws kiln::Error (kNotFound) "<what> '<path>' cannot be read".
std::string read_config_file(const std::string& path, const std::string& what);

}  // namespace kiln::serving
