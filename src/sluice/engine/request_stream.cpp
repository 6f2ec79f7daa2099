// RequestStream: a mutex-guarded mailbox. The engine coalesces events into one
// pending RequestOutput, so a slow reader sees fewer, larger events instead of
// an unbounded queue.
#include <condition_variable>
#include <mutex>

#include "sluice/engine/engine.h"

namespace sluice {

struct RequestStream::State {
  mutable std::mutex mutex;
  std::condition_variable ready;
  std::optional<RequestOutput> pending;
  bool finished = false;
  std::function<void()> on_ready;
};

RequestStream::RequestStream(std::string request_id)
    : request_id_(std::move(request_id)), state_(std::make_shared<State>()) {}

std::optional<RequestOutput> RequestStream::poll() {
  std::lock_guard lock(state_->mutex);
  std::optional<RequestOutput> out = std::move(state_->pending);
  state_->pending.reset();
  return out;
}

std::optional<RequestOutput> RequestStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(state_->mutex);
  state_->ready.wait_for(lock, timeout, [&] { return state_->pending.has_value(); });
  std::optional<RequestOutput> out = std::move(state_->pending);
  state_->pending.reset();
  return out;
}

void RequestStream::set_on_ready(std::function<void()> on_ready) {
  bool call_now = false;
  {
    std::lock_guard lock(state_->mutex);
    state_->on_ready = on_ready;
    call_now = state_->pending.has_value();
  }
  if (call_now && on_ready) on_ready();
}

bool RequestStream::finished() const {
  std::lock_guard lock(state_->mutex);
  return state_->finished;
}

void RequestStream::push(RequestOutput output) {
  std::function<void()> on_ready;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->finished) return;  // nothing follows the final event
    state_->finished = output.finished();
    if (!state_->pending) {
      state_->pending = std::move(output);
    } else {
      RequestOutput& merged = *state_->pending;
      for (GeneratedToken& t : output.tokens) merged.tokens.push_back(std::move(t));
      merged.finish_reason = output.finish_reason;
      merged.error_message = std::move(output.error_message);
      merged.stop_token = output.stop_token;
      merged.num_prompt_tokens = output.num_prompt_tokens;
      merged.num_cached_tokens = output.num_cached_tokens;
      merged.num_generated_tokens = output.num_generated_tokens;
    }
    on_ready = state_->on_ready;
  }
  state_->ready.notify_all();
  if (on_ready) on_ready();
}

}  // namespace sluice
