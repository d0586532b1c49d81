// A tiny --name=value flag parser for the example programs. A malformed or out-of-range value
// is a flag error: a message naming the flag, its value and what it accepts, then exit(2).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <system_error>

namespace examples {

// Upper bounds for integer flags: what an int (epochs, batch sizes) or an int64 holds.
inline constexpr long long kMaxInt = std::numeric_limits<int>::max();
inline constexpr long long kMaxInt64 = std::numeric_limits<long long>::max();

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
  // An integer in [min, max] (any long long by default), written in decimal ("12", "-3"; not
  // "12x", "1e3" or " 12").
  long long integer(const std::string& name, long long fallback,
                    long long min = std::numeric_limits<long long>::min(),
                    long long max = kMaxInt64) {
    const std::string text = str(name, std::to_string(fallback));
    long long value = 0;
    if (!parse_whole(text, value) || value < min || value > max) {
      const bool bounded = min != std::numeric_limits<long long>::min() || max != kMaxInt64;
      bad_value(name, text,
                bounded ? "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]"
                        : "an integer");
    }
    return value;
  }
  // A finite number in [min, max] ("0.5", "1e-3"; not "fast", "nan" or "inf").
  double number(const std::string& name, double fallback, double min, double max) {
    const std::string text = str(name, shortest(fallback));
    double value = 0;
    if (!parse_whole(text, value) || !(value >= min && value <= max)) {
      bad_value(name, text, "a finite number in [" + shortest(min) + ", " + shortest(max) + "]");
    }
    return value;
  }
  // A finite number > 0, as a learning rate.
  double positive(const std::string& name, double fallback) {
    const std::string text = str(name, shortest(fallback));
    double value = 0;
    if (!parse_whole(text, value) || !(std::isfinite(value) && value > 0)) {
      bad_value(name, text, "a finite number > 0");
    }
    return value;
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
  [[noreturn]] static void bad_value(const std::string& name, const std::string& text,
                                     const std::string& expected) {
    bad("--" + name + "=" + text + " is not " + expected);
  }
  // Reads all of `text` as a T: false when it is malformed, has trailing characters or does
  // not fit.
  template <typename T>
  static bool parse_whole(const std::string& text, T& value) {
    const char* end = text.data() + text.size();
    auto [stop, ec] = std::from_chars(text.data(), end, value);
    return ec == std::errc() && stop == end;
  }
  static std::string shortest(double value) {
    char buffer[32];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
    return std::string(buffer, ec == std::errc() ? end : buffer);
  }
  std::map<std::string, std::string> values_, known_;
};

}  // namespace examples
