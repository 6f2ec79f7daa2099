#include "sluice/common/setup_time.h"

#include <atomic>

namespace sluice {
namespace {

std::atomic<double> g_setup_ms{0.0};

}  // namespace

void add_setup_ms(double ms) { g_setup_ms.fetch_add(ms, std::memory_order_relaxed); }

double total_setup_ms() { return g_setup_ms.load(std::memory_order_relaxed); }

}  // namespace sluice
