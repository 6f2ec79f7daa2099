// Blocking one-shot HTTP GETs for what happens before a run: waiting for the
// server's /health and asking /v1/models for a model name.
#pragma once

#include <string>

#include "sluice/common/result.h"
#include "sluice/loadgen/server_target.h"

namespace sluice::loadgen {

struct HttpReply {
  int status = 0;
  std::string body;
};

Result<HttpReply> http_get(const ServerTarget& target, const std::string& path);

// Polls /health until it answers 200, at most `timeout_s` seconds.
Status wait_for_health(const ServerTarget& target, double timeout_s);

// The first model id /v1/models lists.
Result<std::string> first_served_model(const ServerTarget& target);

}  // namespace sluice::loadgen
