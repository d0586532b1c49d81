// A tiny --name=value flag parser for the example programs. A malformed or out-of-range value
// is a flag error: a message naming the flag, its value and what it accepts, then exit(2).
// --help (or -h) lists the flags a program reads, with their defaults, and exits 0.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <system_error>
#include <vector>

namespace examples {

// Upper bounds for integer flags: what an int (epochs, batch sizes) or an int64 holds.
inline constexpr long long kMaxInt = std::numeric_limits<int>::max();
inline constexpr long long kMaxInt64 = std::numeric_limits<long long>::max();

class Flags {
 public:
  Flags(int argc, char** argv) : program_(argc > 0 ? argv[0] : "program") {
    program_ = program_.substr(program_.rfind('/') + 1);
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        help_ = true;
        continue;
      }
      if (arg.rfind("--", 0) != 0) bad("unexpected argument '" + arg + "'");
      size_t eq = arg.find('=');
      if (eq == std::string::npos) bad("flags are --name=value, got '" + arg + "'");
      values_[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
    }
    // Under --help every flag reads its default, so that bad values do not stop the listing.
    if (help_) values_.clear();
  }
  std::string str(const std::string& name, const std::string& fallback) {
    return read(name, fallback, "");
  }
  // One of `choices` ("none", "mirrored", ...).
  std::string choice(const std::string& name, const std::string& fallback,
                     std::initializer_list<const char*> choices) {
    std::string accepts;  // "a, b or c"
    for (size_t i = 0; i < choices.size(); ++i) {
      if (i > 0) accepts += i + 1 == choices.size() ? " or " : ", ";
      accepts += choices.begin()[i];
    }
    const std::string text = read(name, fallback, accepts);
    for (const char* c : choices) {
      if (text == c) return text;
    }
    bad_value(name, text, accepts);
  }
  // An integer in [min, max] (any long long by default), written in decimal ("12", "-3"; not
  // "12x", "1e3" or " 12").
  long long integer(const std::string& name, long long fallback,
                    long long min = std::numeric_limits<long long>::min(),
                    long long max = kMaxInt64) {
    const bool bounded = min != std::numeric_limits<long long>::min() || max != kMaxInt64;
    const std::string accepts =
        bounded ? "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]"
                : "an integer";
    const std::string text = read(name, std::to_string(fallback), accepts);
    long long value = 0;
    if (!parse_whole(text, value) || value < min || value > max) bad_value(name, text, accepts);
    return value;
  }
  // A finite number in [min, max] ("0.5", "1e-3"; not "fast", "nan" or "inf").
  double number(const std::string& name, double fallback, double min, double max) {
    const std::string accepts = "a finite number in [" + shortest(min) + ", " + shortest(max) + "]";
    const std::string text = read(name, shortest(fallback), accepts);
    double value = 0;
    if (!parse_whole(text, value) || !(value >= min && value <= max)) {
      bad_value(name, text, accepts);
    }
    return value;
  }
  // A finite number > 0, as a learning rate.
  double positive(const std::string& name, double fallback) {
    const std::string text = read(name, shortest(fallback), "a finite number > 0");
    double value = 0;
    if (!parse_whole(text, value) || !(std::isfinite(value) && value > 0)) {
      bad_value(name, text, "a finite number > 0");
    }
    return value;
  }
  // Whether the command line set `name` (false under --help).
  bool given(const std::string& name) const { return values_.count(name) > 0; }
  // Call after reading every flag: under --help prints the flags and exits 0; otherwise rejects
  // flags the program does not know.
  void check() {
    if (help_) {
      std::cout << "usage: " << program_ << (known_.empty() ? "\n" : " [--flag=value ...]\n");
      if (known_.empty()) std::cout << program_ << " takes no flags.\n";
      for (const Known& k : known_) {
        std::cout << "  --" << k.name << "=" << k.fallback << (k.accepts.empty() ? "" : "  ")
                  << k.accepts << "\n";
      }
      std::exit(0);
    }
    for (const auto& [name, value] : values_) {
      if (!is_known(name)) {
        std::string list;
        for (const Known& k : known_) list += " --" + k.name + "=" + k.fallback;
        bad("unknown flag --" + name +
            (known_.empty() ? " (" + program_ + " takes no flags)"
                            : " (known, with defaults:" + list + ")"));
      }
    }
  }
  // A flag error found after reading the flags (a combination of them): exit 2.
  [[noreturn]] static void bad(const std::string& message) {
    std::cerr << "error: " << message << "\n";
    std::exit(2);
  }

 private:
  struct Known {
    std::string name, fallback, accepts;
  };
  // The flag's value as given, or `fallback`; records it (in reading order) for --help.
  std::string read(const std::string& name, const std::string& fallback,
                   const std::string& accepts) {
    if (!is_known(name)) known_.push_back({name, fallback, accepts});
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  bool is_known(const std::string& name) const {
    for (const Known& k : known_) {
      if (k.name == name) return true;
    }
    return false;
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
  std::string program_;
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::vector<Known> known_;
};

}  // namespace examples
