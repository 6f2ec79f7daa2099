#include "sluice/loadgen/svg_plot.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sluice::loadgen {
namespace {

constexpr double kWidth = 1000, kLeft = 70, kRight = 20;
constexpr double kTopY0 = 50, kTopY1 = 470;      // token lines panel
constexpr double kBottomY0 = 520, kBottomY1 = 660;  // decode bars panel
constexpr double kHeight = 700;
constexpr std::size_t kMaxPointsPerLine = 1500;

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A tick step of 1, 2 or 5 times a power of ten giving at most ~8 ticks.
double tick_step(double range) {
  if (range <= 0) return 1;
  const double raw = range / 8.0;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

struct Axis {
  double max_value;
  double pixel0, pixel1;  // pixel of 0 and of max_value
  double at(double v) const { return pixel0 + (pixel1 - pixel0) * (max_value > 0 ? v / max_value : 0); }
};

void draw_axes(std::string& svg, const Axis& x, const Axis& y, const char* y_label, bool x_labels) {
  svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#888"/>)"
                     "\n",
                     x.pixel0, y.pixel1, x.pixel1 - x.pixel0, y.pixel0 - y.pixel1);
  const double xs = tick_step(x.max_value);
  for (double v = 0; v <= x.max_value + 1e-9; v += xs) {
    svg += fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1:.1f}" y2="{2:.1f}" stroke="#eee"/>)"
                       "\n",
                       x.at(v), y.pixel0, y.pixel1);
    if (x_labels)
      svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="middle">{:g}</text>)"
                         "\n",
                         x.at(v), y.pixel0 + 14, v);
  }
  const double ys = tick_step(y.max_value);
  for (double v = 0; v <= y.max_value + 1e-9; v += ys)
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="end">{:g}</text>)"
                       "\n",
                       x.pixel0 - 4, y.at(v) + 4, v);
  svg += fmt::format(
      R"svg(<text x="14" y="{0:.1f}" font-size="12" text-anchor="middle" transform="rotate(-90 14 {0:.1f})">{1}</text>)svg"
      "\n",
      (y.pixel0 + y.pixel1) / 2, y_label);
}

std::string color(const RequestRecord& r, std::size_t nth_of_role) {
  const double hue = r.role == RequestRole::kForeground ? std::fmod(static_cast<double>(nth_of_role) * 37.0, 70.0) - 20
                                                        : 190 + std::fmod(static_cast<double>(nth_of_role) * 23.0, 70.0);
  return fmt::format("hsl({:.0f},75%,{}%)", hue < 0 ? hue + 360 : hue, r.role == RequestRole::kForeground ? 45 : 55);
}

}  // namespace

std::string render_svg_plot(const std::string& title, const std::vector<RequestRecord>& records,
                            const BenchSummary& summary) {
  const double duration_s = std::max(summary.duration_ms / 1000.0, 1e-3);
  std::int64_t max_tokens = 1;
  for (const RequestRecord& r : records) max_tokens = std::max<std::int64_t>(max_tokens, r.token_ms.size());
  std::int64_t max_rate = 1;
  for (std::int64_t n : summary.decode_tokens_per_second) max_rate = std::max(max_rate, n);

  const Axis x{duration_s, kLeft, kWidth - kRight};
  const Axis y_tokens{static_cast<double>(max_tokens), kTopY1, kTopY0};
  const Axis y_rate{static_cast<double>(max_rate), kBottomY1, kBottomY0};
  // A gap longer than this is drawn as a step (flat, then up), so stalls show.
  const double step_gap_ms = std::max(50.0, summary.duration_ms / 500.0);

  std::string svg = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" font-family="sans-serif">)"
      "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, kHeight);
  svg += fmt::format(R"(<text x="{:.0f}" y="22" font-size="14" text-anchor="middle">{}</text>)"
                     "\n",
                     kWidth / 2, escape_xml(title));
  svg += fmt::format(R"(<text x="{:.0f}" y="40" font-size="11" text-anchor="middle" fill="#555">)"
                     "output tokens per request (orange/red: foreground, blue: background chats; flat = waiting)"
                     "</text>\n",
                     kWidth / 2);
  draw_axes(svg, x, y_tokens, "output tokens", true);

  std::size_t num_foreground = 0, num_background = 0;
  for (const RequestRecord& r : records) {
    if (r.status == RequestStatus::kNotSent) continue;
    const std::size_t nth = r.role == RequestRole::kForeground ? num_foreground++ : num_background++;
    const std::size_t stride = r.token_ms.size() / kMaxPointsPerLine + 1;
    std::string points = fmt::format("{:.1f},{:.1f}", x.at(r.send_ms / 1000.0), y_tokens.at(0));
    double previous_ms = r.send_ms;
    for (std::size_t i = 0; i < r.token_ms.size(); ++i) {
      const double t = r.token_ms[i];
      const bool stalled = t - previous_ms > step_gap_ms;
      if (stalled || i == 0) points += fmt::format(" {:.1f},{:.1f}", x.at(t / 1000.0), y_tokens.at(static_cast<double>(i)));
      if (stalled || i % stride == 0 || i + 1 == r.token_ms.size())
        points += fmt::format(" {:.1f},{:.1f}", x.at(t / 1000.0), y_tokens.at(static_cast<double>(i + 1)));
      previous_ms = t;
    }
    if (r.token_ms.empty())  // never got a token: flat at zero until it ended
      points += fmt::format(" {:.1f},{:.1f}", x.at(r.end_ms / 1000.0), y_tokens.at(0));
    svg += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.3" points="{}"><title>{} {} ({})</title></polyline>)"
                       "\n",
                       color(r, nth), points, escape_xml(r.label), r.index, status_name(r.status));
  }

  svg += fmt::format(R"(<text x="{:.0f}" y="{:.0f}" font-size="11" text-anchor="middle" fill="#555">)"
                     "decode tokens per second, all streams (time in s)</text>\n",
                     kWidth / 2, kBottomY0 - 8);
  draw_axes(svg, x, y_rate, "tok/s", true);
  for (std::size_t k = 0; k < summary.decode_tokens_per_second.size(); ++k) {
    const double x0 = x.at(static_cast<double>(k)), x1 = x.at(std::min(duration_s, static_cast<double>(k + 1)));
    const double top = y_rate.at(static_cast<double>(summary.decode_tokens_per_second[k]));
    svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#4a7ab5"/>)"
                       "\n",
                       x0, top, std::max(0.5, x1 - x0 - 0.5), y_rate.pixel0 - top);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace sluice::loadgen
