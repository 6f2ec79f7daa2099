// One-time setup done on a step's path: a cuDNN plan built, a CUDA graph
// captured. Such a step's measured time is not what its shape costs (a plan
// build took up to 1 s, S31-2), so the online cost model must not learn from
// it: replayed over a DeepSeek-V3 trace with 15 plan builds, it ended the run
// pricing the GEMMs' FLOPs at 9.5x the prior.
//
// Process-wide, so that every rank's thread and every library wrapper can add
// to it without a handle: a step reads the total before and after it runs.
#pragma once

namespace sluice {

void add_setup_ms(double ms);
double total_setup_ms();

}  // namespace sluice
