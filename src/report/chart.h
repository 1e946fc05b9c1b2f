// The SVG writer behind every chart gpueval draws: report.html's bars, the trend report's score
// per checkpoint and calibration.svg. It owns the element syntax, how coordinates are written
// (a fixed number of decimals per chart), the escaping of text and titles, and the linear and
// log10 scales that map data onto pixels; the callers own the layout. The output has no scripts and no
// external references, so the pages that inline it stay offline.
//
// A Svg is a string under construction: not thread-safe, cheap, one per chart.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gpueval::chart {

// Maps the data range [d0, d1] onto the pixel range [p0, p1]; a reversed range (d0 > d1) draws
// a y axis whose values grow upwards.
struct Scale {
  double d0, d1, p0, p1;
  double operator()(double v) const { return p0 + (p1 - p0) * (v - d0) / (d1 - d0); }
};

// Maps [d0, d1] (both > 0) onto [p0, p1] by log10, for values that span decades
// (perplexities): equal ratios are equal distances.
struct LogScale {
  double d0, d1, p0, p1;
  double operator()(double v) const;
};

// A "nice" tick step (1, 2 or 5 times a power of ten) for about four intervals over `span` > 0.
double nice_step(double span);

// The decades around [lo, hi] (0 < lo <= hi): the exponents {a, b}, a < b, of the largest power
// of ten <= lo and the smallest >= hi (one decade more above when they meet).
std::pair<int, int> decade_range(double lo, double hi);
// A decade tick's label: "0.001" ... "1", "10", "100", "1000"; beyond, 10 with a superscript
// exponent ("10⁴", "10⁻⁵").
std::string decade_label(int exponent);

using Point = std::pair<double, double>;  // x, y in pixels

class Svg {
 public:
  // Opens <svg {first_attribute} width="W" height="H" viewBox="0 0 W H" role="img" aria-label="...">,
  // first_attribute being e.g. class="bars" or the xmlns of a standalone file. Coordinates are
  // written with `decimals` digits after the point.
  Svg(int decimals, const std::string& first_attribute, double width, double height, const std::string& label);

  // A coordinate as this chart writes it.
  std::string num(double v) const;
  // ` name="value"`, the value escaped: the extra attributes the element functions take.
  static std::string attr(const std::string& name, const std::string& value);

  // Markup written as is (a <style> element, a newline between rows).
  Svg& raw(const std::string& markup);
  Svg& line(const std::string& cls, double x1, double y1, double x2, double y2, const std::string& title = "");
  // <text{ class}{ x y}{attrs}>escaped content</text>.
  Svg& text(const std::string& cls, double x, double y, const std::string& attrs, const std::string& content);
  // Text turned by `degrees` about (x, y), for labels along a crowded x axis.
  Svg& rotated_text(const std::string& cls, double x, double y, double degrees, const std::string& attrs,
                    const std::string& content);
  Svg& rect(const std::string& cls, double x, double y, double width, double height, const std::string& attrs,
            const std::string& title);
  Svg& circle(const std::string& cls, double cx, double cy, double r, const std::string& attrs,
              const std::string& title);
  // <path class d="..."/> with the d written by the caller (num() for its numbers).
  Svg& path(const std::string& cls, const std::string& d);
  // A line through the points, as a <path> ("M x yL x y...").
  Svg& path(const std::string& cls, const std::vector<Point>& points);
  // The area between two lines: along `upper`, then back along `lower`, closed.
  Svg& band(const std::string& cls, const std::vector<Point>& upper, const std::vector<Point>& lower);
  // <polyline class points="x,y x,y "/>.
  Svg& polyline(const std::string& cls, const std::vector<Point>& points);

  // Closes the element and returns the whole chart.
  std::string finish();

 private:
  std::string path_data(const std::vector<Point>& points) const;  // "M x yL x y..."

  int decimals_;
  std::string out_;
};

}  // namespace gpueval::chart
