#include "report/chart.h"

#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "common/strings.h"

namespace gpueval::chart {

double nice_step(double span) {
  const double raw = span / 4;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

double LogScale::operator()(double v) const {
  return p0 + (p1 - p0) * (std::log10(v) - std::log10(d0)) / (std::log10(d1) - std::log10(d0));
}

std::pair<int, int> decade_range(double lo, double hi) {
  // A 1e-9 margin keeps an exact power of ten (1000 = 10^3) on its own decade despite rounding.
  const int a = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  int b = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  if (b <= a) b = a + 1;
  return {a, b};
}

std::string decade_label(int exponent) {
  if (exponent >= 0 && exponent <= 3) return std::string("1") + std::string(static_cast<size_t>(exponent), '0');
  if (exponent < 0 && exponent >= -3) return "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + "1";
  static const char* const kSuperscript[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string out = exponent < 0 ? "10⁻" : "10";
  for (const char c : std::to_string(exponent < 0 ? -static_cast<int64_t>(exponent) : exponent)) {
    out += kSuperscript[c - '0'];
  }
  return out;
}

Svg::Svg(int decimals, const std::string& first_attribute, double width, double height, const std::string& label)
    : decimals_(decimals) {
  out_ = fmt::format(
      "<svg {} width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" role=\"img\" "
      "aria-label=\"{}\">\n",
      first_attribute, width, height, width, height, html_escape(label));
}

std::string Svg::num(double v) const { return fmt::format("{:.{}f}", v, decimals_); }

std::string Svg::attr(const std::string& name, const std::string& value) {
  return " " + name + "=\"" + html_escape(value) + "\"";
}

Svg& Svg::raw(const std::string& markup) {
  out_ += markup;
  return *this;
}

namespace {

std::string class_attr(const std::string& cls) { return cls.empty() ? "" : " class=\"" + cls + "\""; }

// ">" and the end tag, with a <title> (a tooltip) between them when there is one.
std::string close(const char* element, const std::string& title) {
  if (title.empty()) return "/>";
  return fmt::format("><title>{}</title></{}>", html_escape(title), element);
}

}  // namespace

Svg& Svg::line(const std::string& cls, double x1, double y1, double x2, double y2, const std::string& title) {
  out_ += fmt::format("<line{} x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"{}", class_attr(cls), num(x1), num(y1), num(x2),
                      num(y2), close("line", title));
  return *this;
}

Svg& Svg::text(const std::string& cls, double x, double y, const std::string& attrs, const std::string& content) {
  out_ += fmt::format("<text{} x=\"{}\" y=\"{}\"{}>{}</text>", class_attr(cls), num(x), num(y), attrs,
                      html_escape(content));
  return *this;
}

Svg& Svg::rotated_text(const std::string& cls, double x, double y, double degrees, const std::string& attrs,
                       const std::string& content) {
  out_ += fmt::format("<text{} transform=\"translate({} {}) rotate({})\"{}>{}</text>", class_attr(cls), num(x), num(y),
                      degrees, attrs, html_escape(content));
  return *this;
}

Svg& Svg::rect(const std::string& cls, double x, double y, double width, double height, const std::string& attrs,
               const std::string& title) {
  out_ += fmt::format("<rect{}{} x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"{}", class_attr(cls), attrs, num(x),
                      num(y), num(width), num(height), close("rect", title));
  return *this;
}

Svg& Svg::circle(const std::string& cls, double cx, double cy, double r, const std::string& attrs,
                 const std::string& title) {
  out_ += fmt::format("<circle{}{} cx=\"{}\" cy=\"{}\" r=\"{}\"{}", class_attr(cls), attrs, num(cx), num(cy), r,
                      close("circle", title));
  return *this;
}

Svg& Svg::path(const std::string& cls, const std::string& d) {
  out_ += fmt::format("<path{} d=\"{}\"/>", class_attr(cls), d);
  return *this;
}

Svg& Svg::path(const std::string& cls, const std::vector<Point>& points) { return path(cls, path_data(points)); }

Svg& Svg::band(const std::string& cls, const std::vector<Point>& upper, const std::vector<Point>& lower) {
  std::vector<Point> outline = upper;
  outline.insert(outline.end(), lower.rbegin(), lower.rend());
  return path(cls, path_data(outline) + "Z");
}

Svg& Svg::polyline(const std::string& cls, const std::vector<Point>& points) {
  std::string p;
  for (const auto& [x, y] : points) p += num(x) + "," + num(y) + " ";
  out_ += fmt::format("<polyline{} points=\"{}\"/>", class_attr(cls), p);
  return *this;
}

std::string Svg::path_data(const std::vector<Point>& points) const {
  std::string d;
  for (const auto& [x, y] : points) d += (d.empty() ? "M" : "L") + num(x) + " " + num(y);
  return d;
}

std::string Svg::finish() {
  out_ += "</svg>\n";
  return std::move(out_);
}

}  // namespace gpueval::chart
