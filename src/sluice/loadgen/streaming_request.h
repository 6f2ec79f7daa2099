// One streaming request over plain HTTP/1.1 on Boost.Beast, driven by the
// caller's io_context (one thread drives hundreds of them). It connects,
// posts the body, reads the SSE stream as it arrives and stamps every chunk
// that carries output text; when the stream ends (or fails, or is cancelled)
// it hands the finished record to `on_done`, exactly once.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "sluice/loadgen/request_record.h"
#include "sluice/loadgen/run_clock.h"
#include "sluice/loadgen/server_target.h"

namespace sluice::loadgen {

class StreamingRequest {
 public:
  using OnDone = std::function<void(RequestRecord)>;

  // Starts at once; `record` comes back through `on_done` filled in.
  static std::shared_ptr<StreamingRequest> start(boost::asio::io_context& io,
                                                 const boost::asio::ip::tcp::resolver::results_type& endpoints,
                                                 const ServerTarget& target, std::string body, RequestRecord record,
                                                 const RunClock& clock, OnDone on_done);
  virtual ~StreamingRequest() = default;

  // Closes the connection (the server sees a client disconnect); the record
  // comes back as cancelled unless it had already finished.
  virtual void cancel() = 0;
};

}  // namespace sluice::loadgen
