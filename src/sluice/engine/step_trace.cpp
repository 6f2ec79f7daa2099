#include "sluice/engine/step_trace.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace sluice {

Result<std::unique_ptr<StepTraceWriter>> StepTraceWriter::open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return Error{fmt::format("--step-trace {}: cannot open for writing: {}", path, std::strerror(errno))};
  return std::unique_ptr<StepTraceWriter>(new StepTraceWriter(file));
}

StepTraceWriter::~StepTraceWriter() { std::fclose(file_); }

void StepTraceWriter::write(double start_ms, double measured_ms, double predicted_ms, const StepShape& shape,
                            const char* lane, double setup_ms) {
  line_.clear();
  fmt::format_to(std::back_inserter(line_), R"({{"start_ms":{:.3f},"measured_ms":{:.4f},"predicted_ms":{:.4f},)",
                 start_ms, measured_ms, predicted_ms);
  if (lane != nullptr) fmt::format_to(std::back_inserter(line_), R"("lane":"{}",)", lane);
  if (setup_ms > 0.0) fmt::format_to(std::back_inserter(line_), R"("setup_ms":{:.4f},)", setup_ms);
  line_ += R"("seqs":[)";
  for (std::size_t i = 0; i < shape.sequences.size(); ++i)
    fmt::format_to(std::back_inserter(line_), "{}[{},{}]", i == 0 ? "" : ",", shape.sequences[i].num_new_tokens,
                   shape.sequences[i].num_computed_tokens);
  line_ += "]}\n";
  // Buffered by stdio; flushed when the writer closes (engine shutdown).
  std::fwrite(line_.data(), 1, line_.size(), file_);
}

}  // namespace sluice
