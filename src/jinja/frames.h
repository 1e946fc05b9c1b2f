// Jinja2's scoping rule for names a frame assigns, computed once per template (jinja/engine.h
// applies it). A frame is the template's top level, a for body (each iteration), a for's else,
// a macro or call body, and a {% set %} or {% filter %} block's body; `if` is not one. Jinja2
// decides, when it compiles a frame, where each name the frame assigns starts out: a name an
// enclosing frame refers to starts as that outer value; a name read in the frame before it is
// first assigned, or assigned in only some branches of an if, starts as the context's value; but
// a name first met as an unconditional assignment, that no enclosing frame refers to, starts
// Undefined, hiding the context's value of the same name until the assignment runs (seen
// from a nested loop or macro that reads it earlier). analyze_frames() finds those names.
// Calls common only. Stateless; thread-safe.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "jinja/syntax.h"

namespace gpueval::jinja {

// For each frame's body (keyed by its address in the syntax tree), the names it starts Undefined.
using FrameUndefined = std::unordered_map<const Body*, std::vector<std::string>>;

FrameUndefined analyze_frames(const Body& root);

}  // namespace gpueval::jinja
