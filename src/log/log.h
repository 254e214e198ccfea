// The project's one logger. Every line shardq writes to stderr as a
// diagnostic (not a command's output) goes through it, with a timestamp and
// a level:
//
//   [2026-12-01 01:02:03.456] [shardq] [warning] queue 'q': ...
//
// Levels: the library is quiet by default (warnings and errors only: what a
// user must know, such as skipped corrupt records or a lost lease); `shardq
// serve` turns on info (start-up, recovery, queues created, leases expired).
// SHARDQ_LOG_LEVEL (trace, debug, info, warning, error, critical, off)
// overrides both; an unknown value is reported once and ignored.
#ifndef SHARDQ_SRC_LOG_LOG_H_
#define SHARDQ_SRC_LOG_LOG_H_

#include <string>

#include <spdlog/spdlog.h>

namespace shardq::logging {

// The "shardq" logger (stderr, thread-safe); made on first use.
spdlog::logger& Logger();

// Sets the level used when SHARDQ_LOG_LEVEL is not set (the library's
// default is warn). Returns the level now in effect.
spdlog::level::level_enum SetDefaultLevel(spdlog::level::level_enum level);

// Parses a SHARDQ_LOG_LEVEL value ("warn" and "warning" both accepted);
// false for anything else.
bool ParseLevel(const std::string& text, spdlog::level::level_enum* level);

// The timestamped line format, shared by every sink (tests check it).
inline constexpr char kPattern[] = "[%Y-%m-%d %H:%M:%S.%e] [shardq] [%l] %v";

}  // namespace shardq::logging

#define SHARDQ_LOG_INFO(...) ::shardq::logging::Logger().info(__VA_ARGS__)
#define SHARDQ_LOG_WARN(...) ::shardq::logging::Logger().warn(__VA_ARGS__)
#define SHARDQ_LOG_ERROR(...) ::shardq::logging::Logger().error(__VA_ARGS__)

#endif  // SHARDQ_SRC_LOG_LOG_H_
