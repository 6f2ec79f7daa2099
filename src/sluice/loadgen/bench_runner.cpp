#include "sluice/loadgen/bench_runner.h"

#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sluice/loadgen/progress_bar.h"
#include "sluice/loadgen/run_clock.h"
#include "sluice/loadgen/streaming_request.h"

namespace sluice::loadgen {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class Runner {
 public:
  Runner(const ServerTarget& target, const Workload& workload, const RunOptions& options,
         tcp::resolver::results_type endpoints)
      : target_(target), workload_(workload), options_(options), endpoints_(std::move(endpoints)),
        clock_(options.server_speedup), followers_(workload.requests.size()) {
    for (std::size_t i = 0; i < workload.requests.size(); ++i) {
      const PlannedRequest& planned = workload.requests[i];
      records_.push_back(initial_record(i, planned));
      if (planned.follows) followers_[*planned.follows].push_back(i);
    }
  }

  std::vector<RequestRecord> run() {
    for (std::size_t i = 0; i < workload_.requests.size(); ++i)
      if (!workload_.requests[i].follows) schedule(i, workload_.requests[i].arrival_ms);
    for (std::int32_t n = 0; n < workload_.background.num_streams; ++n) launch_background();
    if (options_.max_duration_s > 0) {
      auto timer = add_timer(clock_.at(options_.max_duration_s * 1000.0));
      timer->async_wait([this](boost::system::error_code ec) {
        if (!ec) stop();
      });
    }
    if (options_.show_progress) tick_progress();
    if (workload_.requests.empty()) stop();
    io_.run();
    if (progress_) {
      progress_->update(num_foreground_done_, 0, clock_.now_ms());
      progress_->finish();
    }
    return std::move(records_);
  }

 private:
  static RequestRecord initial_record(std::size_t index, const PlannedRequest& planned) {
    return RequestRecord{.index = index,
                         .label = planned.label,
                         .role = planned.role,
                         .arrival_ms = planned.arrival_ms,
                         .num_planned_prompt_tokens = planned.prompt.num_planned_tokens(),
                         .num_planned_output_tokens = planned.max_output_tokens};
  }

  std::shared_ptr<asio::steady_timer> add_timer(RunClock::Clock::time_point at) {
    auto timer = std::make_shared<asio::steady_timer>(io_, at);
    timers_.push_back(timer);
    return timer;
  }

  void schedule(std::size_t index, double arrival_ms) {
    if (stopping_) return;
    records_[index].arrival_ms = arrival_ms;
    auto timer = add_timer(clock_.at(arrival_ms));
    timer->async_wait([this, index](boost::system::error_code ec) {
      if (ec || stopping_) return;
      if (options_.max_concurrency > 0 && num_foreground_in_flight_ >= options_.max_concurrency) {
        ready_.push_back(index);
      } else {
        launch(index, workload_.requests[index]);
      }
    });
  }

  void launch(std::size_t index, const PlannedRequest& planned) {
    if (planned.role == RequestRole::kForeground) ++num_foreground_in_flight_;
    std::string body = request_body(target_, planned, options_.tokens);
    in_flight_[index] = StreamingRequest::start(io_, endpoints_, target_, std::move(body), std::move(records_[index]),
                                                clock_, [this](RequestRecord record) { on_done(std::move(record)); });
  }

  void launch_background() {
    const PlannedRequest planned = workload_.background.nth(num_background_started_++);
    const std::size_t index = records_.size();
    records_.push_back(initial_record(index, planned));
    records_.back().arrival_ms = clock_.now_ms();
    launch(index, planned);
  }

  void on_done(RequestRecord record) {
    const std::size_t index = record.index;
    const bool foreground = record.role == RequestRole::kForeground;
    const double end_ms = record.end_ms;
    records_[index] = std::move(record);
    // The request object is destroyed after its callback returns.
    asio::post(io_, [keep = std::move(in_flight_[index])] {});
    in_flight_.erase(index);
    if (!foreground) {
      // A chat that failed is not replaced: a server refusing them would
      // otherwise be hammered in a tight loop.
      if (!stopping_ && records_[index].status == RequestStatus::kCompleted) launch_background();
      return;
    }
    --num_foreground_in_flight_;
    ++num_foreground_done_;
    for (std::size_t follower : followers_[index]) schedule(follower, end_ms + workload_.requests[follower].arrival_ms);
    if (!stopping_ && !ready_.empty()) {
      const std::size_t next = ready_.front();
      ready_.pop_front();
      launch(next, workload_.requests[next]);
    }
    if (num_foreground_done_ == workload_.requests.size()) stop();
  }

  // Cancels everything still running or waiting; io_.run() then returns.
  void stop() {
    if (stopping_) return;
    stopping_ = true;
    for (auto& timer : timers_) timer->cancel();
    std::vector<std::shared_ptr<StreamingRequest>> running;
    for (auto& [index, request] : in_flight_) running.push_back(request);
    for (auto& request : running) request->cancel();
  }

  void tick_progress() {
    if (!progress_) progress_.emplace(workload_.requests.size());
    progress_->update(num_foreground_done_, static_cast<std::size_t>(num_foreground_in_flight_), clock_.now_ms());
    if (stopping_) return;
    auto timer = add_timer(RunClock::Clock::now() + std::chrono::milliseconds(250));
    timer->async_wait([this](boost::system::error_code ec) {
      if (!ec) tick_progress();
    });
  }

  const ServerTarget& target_;
  const Workload& workload_;
  const RunOptions& options_;
  tcp::resolver::results_type endpoints_;
  asio::io_context io_;
  RunClock clock_;
  std::vector<RequestRecord> records_;
  std::vector<std::vector<std::size_t>> followers_;  // [i]: requests sent after request i finishes
  std::map<std::size_t, std::shared_ptr<StreamingRequest>> in_flight_;
  std::deque<std::size_t> ready_;  // arrived, waiting for a concurrency slot
  std::vector<std::shared_ptr<asio::steady_timer>> timers_;
  std::optional<ProgressBar> progress_;
  std::int32_t num_foreground_in_flight_ = 0;
  std::size_t num_foreground_done_ = 0;
  std::int64_t num_background_started_ = 0;
  bool stopping_ = false;
};

}  // namespace

Result<std::vector<RequestRecord>> run_workload(const ServerTarget& target, const Workload& workload,
                                                const RunOptions& options) {
  asio::io_context resolver_io;
  tcp::resolver resolver(resolver_io);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(target.host, target.port, ec);
  if (ec) return Error{"cannot resolve " + target.host + ":" + target.port + ": " + ec.message()};
  Runner runner(target, workload, options, std::move(endpoints));
  return runner.run();
}

}  // namespace sluice::loadgen
