// run_server: the life of `sluice serve`. Listens first (so /health answers
// 503 while the model loads), loads the model through the caller's function,
// starts the engine, serves, logs a stats line periodically, and on SIGTERM or
// SIGINT drains: refuses new work, lets running requests finish for up to the
// shutdown timeout, aborts the rest (each gets a final in-band error and
// [DONE]), and returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "sluice/common/result.h"
#include "sluice/server/http_server.h"
#include "sluice/server/model_context.h"
#include "sluice/server/openai_service.h"

namespace sluice::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;
  HttpLimits http;
  ServiceOptions service;
  int num_io_threads = 2;
  std::chrono::milliseconds shutdown_timeout{30'000};
  std::chrono::milliseconds stats_log_interval{5'000};  // 0 = off
};

using ModelLoader = std::function<Result<std::shared_ptr<ModelContext>>()>;

Status run_server(const ServerConfig& config, const ModelLoader& load_model);

// The periodic stats line, from two snapshots `elapsed_s` apart (vLLM's format
// plus the longest decode stall).
std::string stats_log_line(const EngineStats& previous, const EngineStats& now, double elapsed_s);

}  // namespace sluice::server
