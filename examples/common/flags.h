// A tiny --name=value flag parser for the example programs.
#pragma once

#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

namespace examples {

class Flags {
 public:
  Flags(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) bad("unexpected argument '" + arg + "'");
      size_t eq = arg.find('=');
      if (eq == std::string::npos) bad("flags are --name=value, got '" + arg + "'");
      values_[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
    }
  }
  std::string str(const std::string& name, const std::string& fallback) {
    known_[name] = fallback;
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  long long integer(const std::string& name, long long fallback) {
    return std::stoll(str(name, std::to_string(fallback)));
  }
  double number(const std::string& name, double fallback) {
    return std::stod(str(name, std::to_string(fallback)));
  }
  // Call after reading every flag: rejects flags the program does not know.
  void check() {
    for (const auto& [name, value] : values_) {
      if (!known_.count(name)) {
        std::string list;
        for (const auto& [k, v] : known_) list += " --" + k + "=" + v;
        bad("unknown flag --" + name + " (known, with defaults:" + list + ")");
      }
    }
  }

 private:
  [[noreturn]] static void bad(const std::string& message) {
    std::cerr << "error: " << message << "\n";
    std::exit(2);
  }
  std::map<std::string, std::string> values_, known_;
};

}  // namespace examples
