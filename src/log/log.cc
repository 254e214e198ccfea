#include "src/log/log.h"

#include <cstdlib>
#include <memory>
#include <mutex>

#include <spdlog/sinks/stdout_sinks.h>

namespace shardq::logging {
namespace {

struct State {
  std::shared_ptr<spdlog::logger> logger;
  bool env_set = false;  // SHARDQ_LOG_LEVEL decides; SetDefaultLevel doesn't
};

State& Make() {
  static State* state = [] {
    auto* s = new State;
    // Not registered with spdlog's registry: an application's own spdlog
    // set-up (drop_all, set_level) leaves ours alone.
    s->logger = std::make_shared<spdlog::logger>(
        "shardq", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    s->logger->set_pattern(kPattern);
    s->logger->set_level(spdlog::level::warn);
    s->logger->flush_on(spdlog::level::trace);  // a line is on stderr when the call returns
    if (const char* env = std::getenv("SHARDQ_LOG_LEVEL"); env != nullptr && *env != '\0') {
      spdlog::level::level_enum level;
      if (ParseLevel(env, &level)) {
        s->logger->set_level(level);
        s->env_set = true;
      } else {
        s->logger->warn(
            "SHARDQ_LOG_LEVEL='{}' is not one of trace, debug, info, warning, error, "
            "critical, off; ignored",
            env);
      }
    }
    return s;
  }();
  return *state;
}

}  // namespace

spdlog::logger& Logger() { return *Make().logger; }

spdlog::level::level_enum SetDefaultLevel(spdlog::level::level_enum level) {
  State& s = Make();
  if (!s.env_set) s.logger->set_level(level);
  return s.logger->level();
}

bool ParseLevel(const std::string& text, spdlog::level::level_enum* level) {
  static constexpr struct {
    const char* name;
    spdlog::level::level_enum level;
  } kLevels[] = {{"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
                 {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
                 {"warning", spdlog::level::warn}, {"error", spdlog::level::err},
                 {"critical", spdlog::level::critical}, {"off", spdlog::level::off}};
  for (const auto& l : kLevels) {
    if (text == l.name) {
      *level = l.level;
      return true;
    }
  }
  return false;
}

}  // namespace shardq::logging
