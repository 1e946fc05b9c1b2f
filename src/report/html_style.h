// The look shared by gpueval's offline HTML pages (report.html, the trend report): one inline
// stylesheet, and the text metrics that the inline SVG charts lay their labels out with.
// Private to src/. Constants and pure functions only: thread-safe.
#pragma once

#include <cstddef>
#include <string>

namespace gpueval::html {

// The stylesheet every page inlines in its <style> element: layout, tables, warnings, and the
// SVG chart classes (.axis, .grid, .err, .bar, .group).
extern const char* const kStyle;

// 12px monospace advance (0.6 em) with a margin: how wide one character of an SVG label is.
constexpr double kCharWidth = 7.4;

// UTF-8 code points in `s`: the width of a label in characters.
size_t code_points(const std::string& s);

}  // namespace gpueval::html
