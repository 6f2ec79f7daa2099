// StepTraceWriter: one JSON line per executed step (--step-trace FILE), so a
// run on real hardware can calibrate the cost model offline: what each step
// held (per sequence: new tokens, tokens already cached), when it started, how
// long it took, and what the planner predicted.
//
//   {"start_ms":12.5,"measured_ms":48.1,"predicted_ms":45.0,"seqs":[[1,812],[256,100352]]}
//
// With two step loops (--decode-lane) each line also names its lane:
// "lane":"main" or "lane":"decode".
//
// sim/cost_calibration.h reads it back.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "sluice/common/result.h"
#include "sluice/sched/cost_model.h"

namespace sluice {

class StepTraceWriter {
 public:
  // Truncates `path`; the error names it.
  static Result<std::unique_ptr<StepTraceWriter>> open(const std::string& path);
  ~StepTraceWriter();
  StepTraceWriter(const StepTraceWriter&) = delete;
  StepTraceWriter& operator=(const StepTraceWriter&) = delete;

  // `lane`: nullptr with one step loop. `setup_ms`: of measured_ms, one-time
  // setup (StepOutput::setup_ms), written when there was any.
  void write(double start_ms, double measured_ms, double predicted_ms, const StepShape& shape,
             const char* lane = nullptr, double setup_ms = 0.0);

 private:
  explicit StepTraceWriter(std::FILE* file) : file_(file) {}
  std::FILE* file_;
  std::string line_;  // reused per step
};

}  // namespace sluice
