#include "jinja/engine.h"

#include <ctime>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "gpueval/error.h"
#include "jinja/builtins.h"

namespace gpueval::jinja {
namespace {

constexpr int kMaxCallDepth = 100;
constexpr int64_t kMaxRange = 100000;  // Jinja2's sandbox MAX_RANGE
// A render is bounded (a loop of range(100000) inside another is 10^10 steps): past these it
// is an error, not a hang or an exhausted memory.
constexpr int64_t kMaxSteps = 20'000'000;
constexpr size_t kMaxOutput = size_t{256} << 20;

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Scope> parent;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

std::vector<Value> unpack(const Value& v, size_t want) {
  std::vector<Value> items = v.iterate();
  if (items.size() > want)
    throw RenderError("ValueError", fmt::format("too many values to unpack (expected {})", want));
  if (items.size() < want)
    throw RenderError("ValueError",
                      fmt::format("not enough values to unpack (expected {}, got {})", want, items.size()));
  return items;
}

class Interpreter {
 public:
  Interpreter(const RenderOptions& options, const FrameUndefined& frames, const std::string& source)
      : options_(options), frames_(frames), source_(source) {}

  // A new scope for `body`'s frame, holding Undefined for the names Jinja2 starts Undefined.
  ScopePtr frame(const ScopePtr& parent, const Body& body) {
    ScopePtr s = child(parent);
    const auto it = frames_.find(&body);
    if (it != frames_.end())
      for (const std::string& n : it->second) s->set(n, Value::undefined(fmt::format("'{}' is undefined", n)));
    return s;
  }
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;
  // Values may reference each other in a cycle (a namespace holding itself; a macro stored in
  // the scope it reads): the namespaces are emptied and the pinned scopes dropped here, so a
  // render frees everything it made.
  ~Interpreter() {
    for (const auto& ns : namespaces_) ns->entries.clear();
    for (const auto& scope : pinned_scopes_) scope->vars.clear();
  }

  enum class Flow { kNormal, kBreak, kContinue };

  Value evaluate(const Expr& e, const ScopePtr& scope) { return eval(e, scope); }

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow f = exec(*s, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Value lookup(const std::string& name, const ScopePtr& scope) {
    if (const Value* v = scope->find(name)) return *v;
    if (name == "range") return global_range();
    if (name == "namespace") return global_namespace(Value::Kind::kNamespace, "namespace");
    if (name == "dict") return global_namespace(Value::Kind::kDict, "dict");
    if (name == "joiner") {
      return Value::callable("joiner", [](CallArgs& a) -> Value {
        const std::string sep = str(a.take(0, "sep").value_or(Value(", ")));
        a.done("joiner");
        auto used = std::make_shared<bool>(false);
        return Value::callable("joiner", [sep, used](CallArgs&) -> Value {
          if (!*used) {
            *used = true;
            return Value("");
          }
          return Value(sep);
        });
      });
    }
    if (name == "raise_exception") {
      return Value::callable("raise_exception", [](CallArgs& a) -> Value {
        const auto msg = a.take(0, "message");
        throw RenderError("TemplateError", msg ? str(*msg) : "");
      });
    }
    if (name == "strftime_now") {
      return Value::callable("strftime_now", [this](CallArgs& a) -> Value {
        const auto f = a.take(0, "format");
        a.done("strftime_now");
        if (!f) fail_type("strftime_now() missing 1 required positional argument: 'format'");
        return Value(strftime_now(str(*f)));
      });
    }
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

 private:
  bool test_truth(const Value& v) {
    if (options_.strict_undefined && v.is_undefined()) fail_undefined(v);
    return truthy(v);
  }

  std::string strftime_now(const std::string& format) {
    if (options_.strftime_now) return options_.strftime_now(format);
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
    return std::string(buf, n);
  }

  static Value global_range() {
    return Value::callable("range", [](CallArgs& a) -> Value {
      if (!a.keyword.empty()) fail_type("range() takes no keyword arguments");
      std::vector<int64_t> n;
      for (const Value& v : a.positional) {
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_int()) fail_type(fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
        n.push_back(v.as_int());
      }
      if (n.empty() || n.size() > 3) fail_type(fmt::format("range expected at most 3 arguments, got {}", n.size()));
      const int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1],
                    step = n.size() == 3 ? n[2] : 1;
      if (step == 0) throw RenderError("ValueError", "range() arg 3 must not be zero");
      std::vector<Value> out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (static_cast<int64_t>(out.size()) >= kMaxRange)
          throw RenderError("OverflowError",
                            "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        out.emplace_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return Value::list(std::move(out));
    });
  }

  Value global_namespace(Value::Kind kind, const std::string& name) {
    return Value::callable(name, [this, kind](CallArgs& a) -> Value {
      auto d = std::make_shared<Dict>();
      for (const Value& p : a.positional) {
        if (p.is_dict()) {
          for (const auto& [k, v] : p.as_dict().entries) d->set(k, v);
        } else {
          for (const Value& pair : p.iterate()) {
            const std::vector<Value> kv = unpack(pair, 2);
            d->set(kv[0], kv[1]);
          }
        }
      }
      for (const auto& [k, v] : a.keyword) d->set(Value(k), v);
      if (kind == Value::Kind::kNamespace) {
        for (const auto& [k, v] : d->entries) {
          if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_')
            throw RenderError("SecurityError",
                              fmt::format("Chat templates cannot store underscore-prefixed attributes on a "
                                          "namespace, but got {}. Please rename the attribute.",
                                          repr(k)));
        }
      }
      if (kind == Value::Kind::kNamespace) namespaces_.push_back(d);
      return Value::dict(d, kind);
    });
  }

  void assign(const std::vector<std::string>& targets, const Value& v, const ScopePtr& scope) {
    if (targets.size() == 1) {
      scope->set(targets[0], v);
      return;
    }
    const std::vector<Value> items = unpack(v, targets.size());
    for (size_t i = 0; i < targets.size(); ++i) scope->set(targets[i], items[i]);
  }

  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    if (++steps_ > kMaxSteps)
      throw RenderError("RuntimeError",
                        fmt::format("the template ran past {} steps (gpueval's bound on a render)", kMaxSteps));
    if (out.size() > kMaxOutput)
      throw RenderError("RuntimeError", fmt::format("the template rendered past {} MiB (gpueval's bound on a render)",
                                                    kMaxOutput >> 20));
    switch (s.kind) {
      case Stmt::Kind::kText: out += s.text; return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        const Value v = eval(*s.expr, scope);
        if (options_.strict_undefined && v.is_undefined()) fail_undefined(v);
        out += str(v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf: {
        for (const auto& [cond, body] : s.branches) {
          if (test_truth(eval(*cond, scope))) return exec(body, scope, out);
        }
        return exec(s.else_body, scope, out);
      }
      case Stmt::Kind::kFor: return exec_for(s, scope, out);
      case Stmt::Kind::kSet: {
        const Value v = eval(*s.expr, scope);
        if (!s.attr.empty()) {
          const Value ns = lookup(s.targets[0], scope);
          if (ns.kind() != Value::Kind::kNamespace)
            throw RenderError("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
          if (s.attr[0] == '_')
            throw RenderError("SecurityError",
                              fmt::format("Chat templates cannot store underscore-prefixed attributes on a "
                                          "namespace, but got '{}'. Please rename the attribute.",
                                          s.attr));
          ns.mutable_dict().set(Value(s.attr), v);
        } else {
          assign(s.targets, v, scope);
        }
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string body;
        // A break or continue inside it acts on the enclosing loop, and nothing is assigned.
        const Flow f = exec(s.body, frame(scope, s.body), body);
        if (f != Flow::kNormal) return f;
        Value v(body);
        if (s.filter) v = eval_filter_chain(*s.filter, v, scope);
        scope->set(s.targets[0], v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: {
        scope->set(s.name, make_macro(s, scope));
        return Flow::kNormal;
      }
      case Stmt::Kind::kFilterBlock: {
        std::string body;
        const Flow f = exec(s.body, frame(scope, s.body), body);
        if (f != Flow::kNormal) return f;  // Jinja2 drops the buffered body then
        if (s.filter) body = str(eval_filter_chain(*s.filter, Value(body), scope));
        out += body;
        return f;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
      case Stmt::Kind::kCallBlock: {
        const Expr& call = *s.expr;
        const Value callee = eval(*call.a, scope);
        CallArgs a = arguments(call, scope);
        a.keyword.emplace_back("caller", make_macro(s, scope));
        if (callee.is_undefined()) fail_undefined(callee);
        if (!callee.is_callable()) fail_type(fmt::format("'{}' object is not callable", type_name(callee)));
        out += str(callee.as_callable().call(a));
        return Flow::kNormal;
      }
    }
    throw RenderError("TemplateRuntimeError", "statement outside gpueval's Jinja subset");
  }

  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    const Value iterable = eval(*s.expr, scope);
    if (options_.strict_undefined && iterable.is_undefined()) fail_undefined(iterable);
    std::vector<Value> items = iterable.iterate();
    if (s.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        ScopePtr f = child(scope);
        assign(s.targets, item, f);
        if (test_truth(eval(*s.filter, f))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    auto last_changed = std::make_shared<std::optional<Value>>();  // loop.changed's memory, across iterations
    // It may hold the loop object that holds it (`loop.changed(loop)`): forgotten when the loop ends.
    struct Forget {
      std::shared_ptr<std::optional<Value>> memory;
      ~Forget() { memory->reset(); }
    } forget{last_changed};
    const Value changed = Value::callable("changed", [last_changed](CallArgs& a) -> Value {
      const Value now = Value::list(a.positional);
      if (*last_changed && equal(**last_changed, now)) return Value(false);
      *last_changed = now;
      return Value(true);
    });
    bool completed = false;
    for (int64_t i = 0; i < n; ++i) {
      ScopePtr body_scope = frame(scope, s.body);
      assign(s.targets, items[static_cast<size_t>(i)], body_scope);
      auto loop = std::make_shared<Dict>();
      loop->set(Value("index"), Value(i + 1));
      loop->set(Value("index0"), Value(i));
      loop->set(Value("revindex"), Value(n - i));
      loop->set(Value("revindex0"), Value(n - i - 1));
      loop->set(Value("first"), Value(i == 0));
      loop->set(Value("last"), Value(i == n - 1));
      loop->set(Value("length"), Value(n));
      loop->set(Value("depth"), Value(1));
      loop->set(Value("depth0"), Value(0));
      if (i > 0) loop->set(Value("previtem"), items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) loop->set(Value("nextitem"), items[static_cast<size_t>(i + 1)]);
      loop->set(Value("cycle"), Value::callable("cycle", [i](CallArgs& a) -> Value {
                  if (a.positional.empty()) fail_type("no items for cycling given");
                  return a.positional[static_cast<size_t>(i) % a.positional.size()];
                }));
      loop->set(Value("changed"), changed);
      body_scope->set("loop", Value::dict(loop, Value::Kind::kLoop));
      const Flow f = exec(s.body, body_scope, out);
      if (f == Flow::kNormal) completed = true;
      if (f == Flow::kBreak) break;
    }
    // Jinja2 marks an iteration done at the end of its body: `else` runs when none got there
    // (no items, or each one left by break or continue).
    if (!completed && !s.else_body.empty()) return exec(s.else_body, frame(scope, s.else_body), out);
    return Flow::kNormal;
  }

  // The macro holds its scope weakly (the scope may hold the macro); the interpreter keeps the
  // scope alive until the render ends.
  Value make_macro(const Stmt& s, const ScopePtr& scope_of_definition) {
    const Stmt* stmt = &s;
    pinned_scopes_.push_back(scope_of_definition);
    std::weak_ptr<Scope> weak = scope_of_definition;
    return Value::callable(s.name, [this, stmt, weak](CallArgs& a) -> Value {
      const ScopePtr defined_in = weak.lock();
      const auto& params = stmt->params;
      if (a.positional.size() > params.size())
        fail_type(fmt::format("macro '{}' takes not more than {} argument(s)", stmt->name, params.size()));
      ScopePtr scope = frame(defined_in, stmt->body);
      for (size_t i = 0; i < params.size(); ++i) {
        const auto& [name, def] = params[i];
        std::optional<Value> v;
        if (i < a.positional.size()) v = a.positional[i];
        for (auto it = a.keyword.begin(); it != a.keyword.end(); ++it) {
          if (it->first == name) {
            v = it->second;
            a.keyword.erase(it);
            break;
          }
        }
        if (!v) v = def ? eval(*def, scope) : Value::undefined(fmt::format("parameter '{}' was not provided", name));
        scope->set(name, *v);
      }
      for (auto it = a.keyword.begin(); it != a.keyword.end(); ++it) {
        if (it->first == "caller") {
          scope->set("caller", it->second);
          a.keyword.erase(it);
          break;
        }
      }
      if (!a.keyword.empty())
        fail_type(fmt::format("macro '{}' takes no keyword argument '{}'", stmt->name, a.keyword.front().first));
      if (++call_depth_ > kMaxCallDepth) {
        call_depth_ = 0;
        throw RenderError("RecursionError", "maximum recursion depth exceeded");
      }
      std::string out;
      exec(stmt->body, scope, out);
      --call_depth_;
      return Value(out);
    });
  }

  CallArgs arguments(const Expr& e, const ScopePtr& scope) {
    CallArgs a;
    for (const ExprPtr& x : e.args) a.positional.push_back(used(eval(*x, scope)));
    for (const auto& [k, x] : e.kwargs) a.keyword.emplace_back(k, used(eval(*x, scope)));
    return a;
  }

  // A {% filter %} or block set's filters: the innermost operand is `value`.
  Value eval_filter_chain(const Expr& e, const Value& value, const ScopePtr& scope) {
    const Value operand = e.a ? eval_filter_chain(*e.a, value, scope) : value;
    CallArgs a = arguments(e, scope);
    return filter(e.name)(e.name, operand, a);
  }

  // A filter of the template by name; one Jinja2 lacks was let through at load only where it may
  // never run (validate), and raises here as Jinja2's does, after its operand and arguments.
  static FilterFn filter(const std::string& name) {
    const FilterFn f = find_filter(name);
    if (!f) throw RenderError("TemplateRuntimeError", fmt::format("No filter named '{}' found.", name));
    return f;
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::kConst: return e.value;
      case Expr::Kind::kName: return field(lookup(e.name, scope), e);
      case Expr::Kind::kGetattr: return attribute(e, scope, /*as_field=*/true);
      case Expr::Kind::kGetitem: {
        const Value obj = used(eval(*e.a, scope));
        return field(get_item(obj, used(eval(*e.b, scope))), e);
      }
      case Expr::Kind::kSlice: {
        const Value obj = used(eval(*e.a, scope));
        auto part = [&](size_t i) { return e.args[i] ? used(eval(*e.args[i], scope)) : Value(); };
        return get_slice(obj, part(0), part(1), part(2));
      }
      case Expr::Kind::kCall: {
        // A method that is not there is no missing field: `text.foo()` says str has no attribute 'foo'.
        const Value callee =
            e.a->kind == Expr::Kind::kGetattr ? attribute(*e.a, scope, /*as_field=*/false) : eval(*e.a, scope);
        CallArgs a = arguments(e, scope);
        if (callee.is_undefined()) fail_undefined(callee);
        if (!callee.is_callable()) fail_type(fmt::format("'{}' object is not callable", type_name(callee)));
        return callee.as_callable().call(a);
      }
      case Expr::Kind::kFilter: {
        const Value operand = used(eval(*e.a, scope));
        CallArgs a = arguments(e, scope);
        return filter(e.name)(e.name, operand, a);
      }
      case Expr::Kind::kTest: {
        const Value operand = eval(*e.a, scope);
        CallArgs a = arguments(e, scope);
        const TestFn test = find_test(e.name);
        if (!test) throw RenderError("TemplateRuntimeError", fmt::format("No test named '{}' found.", e.name));
        return Value(test(e.name, operand, a) != e.negated);
      }
      case Expr::Kind::kNot: return Value(!test_truth(eval(*e.a, scope)));
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos: {
        const Value v = eval(*e.a, scope);
        if (v.is_undefined()) fail_undefined(v);
        if (e.kind == Expr::Kind::kPos && v.is_number()) return v.is_int() ? Value(v.as_int()) : v;
        if (v.is_int() && v.as_int() == std::numeric_limits<int64_t>::min())
          throw RenderError("OverflowError", "integer past 64 bits (gpueval's Jinja subset)");
        if (v.is_int()) return Value(-v.as_int());
        if (v.kind() == Value::Kind::kFloat) return Value(-v.as_double());
        fail_type(
            fmt::format("bad operand type for unary {}: '{}'", e.kind == Expr::Kind::kNeg ? "-" : "+", type_name(v)));
      }
      case Expr::Kind::kBinary: {
        if (e.name == "and" || e.name == "or") {
          Value l = eval(*e.a, scope);
          const bool t = test_truth(l);
          if (e.name == "and" ? !t : t) return l;
          return eval(*e.b, scope);
        }
        const Value l = used(eval(*e.a, scope));
        return binary_op(e.name, l, used(eval(*e.b, scope)));
      }
      case Expr::Kind::kCompare: {
        Value l = used(eval(*e.a, scope));
        for (const auto& [op, x] : e.ops) {
          const Value r = used(eval(*x, scope));
          bool hit;
          if (op == "==")
            hit = equal(l, r);
          else if (op == "!=")
            hit = !equal(l, r);
          else if (op == "<" || op == ">" || op == "<=" || op == ">=")
            hit = compare(l, r, op);
          else if (op == "in")
            hit = contains(r, l);
          else
            hit = !contains(r, l);
          if (!hit) return Value(false);
          l = r;
        }
        return Value(true);
      }
      case Expr::Kind::kCond: {
        if (test_truth(eval(*e.b, scope))) return eval(*e.a, scope);
        if (e.c) return eval(*e.c, scope);
        return Value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was defined.", e.line));
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& x : e.args) {
          // Jinja2 would print it as "Undefined" inside the list; a task file's missing field is an error.
          items.push_back(used(eval(*x, scope)));
        }
        return Value::list(std::move(items), e.kind == Expr::Kind::kList ? Value::Kind::kList : Value::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        auto d = std::make_shared<Dict>();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i], scope);
          d->set(k, eval(*e.args[i + 1], scope));
        }
        return Value::dict(d);
      }
    }
    throw RenderError("TemplateRuntimeError", "expression outside gpueval's Jinja subset");
  }

  // A missing field (only task files have them) is an error wherever it is used, not only where
  // StrictUndefined's own methods fail: an `is` test and short-circuited and/or may hold it, nothing
  // else (jinja2 would give a TypeError naming StrictUndefined for `text.split(nope)`).
  static const Value& used(const Value& v) {
    if (v.is_missing_field()) fail_undefined(v);
    return v;
  }

  // `obj.name` (e): with name_missing_fields, a key a dict lacks is a missing field (when `as_field`),
  // and an attribute anything else lacks says so naming the object as written: "a.index(b) (int) has
  // no attribute 'x'" where Jinja2 says "'int object' has no attribute 'x'".
  Value attribute(const Expr& e, const ScopePtr& scope, bool as_field) {
    const Value obj = eval(*e.a, scope);
    Value v = get_attr(obj, e.name);
    if (!options_.name_missing_fields || !v.is_undefined() || v.is_unsafe_undefined()) return v;
    if (as_field && obj.is_dict()) return field(std::move(v), e);
    if (e.a->begin >= e.a->end) return v;
    return Value::undefined(fmt::format("{} ({}) has no attribute '{}'", text_of(*e.a), type_name(obj), e.name));
  }

  // A name, attribute or item that is not there, named as written when the options ask for it.
  Value field(Value v, const Expr& e) const {
    if (options_.name_missing_fields && v.is_undefined() && !v.is_unsafe_undefined() && e.begin < e.end)
      return Value::missing_field(text_of(e));
    return v;
  }

  // The expression as the template wrote it.
  std::string text_of(const Expr& e) const {
    return e.begin < e.end && e.end <= source_.size() ? source_.substr(e.begin, e.end - e.begin) : std::string();
  }

  const RenderOptions& options_;
  const FrameUndefined& frames_;
  const std::string& source_;
  int call_depth_ = 0;
  int64_t steps_ = 0;
  std::vector<std::shared_ptr<Dict>> namespaces_;
  std::vector<ScopePtr> pinned_scopes_;
};

// Jinja2's rule for a filter or test name it does not know: an error when the template loads,
// unless the name sits in an if statement or an inline if-expression of its own frame (a for
// body, macro, call or filter block, or set block starts a new frame); there it is an error only
// when evaluated (engine's eval), so a branch no conversation reaches may use one.
void validate(const Expr& e, const std::string& where, bool soft) {
  if (!soft && e.kind == Expr::Kind::kFilter && !has_filter(e.name))
    throw SyntaxError(where, e.line, fmt::format("unsupported filter '{}'", e.name));
  if (!soft && e.kind == Expr::Kind::kTest && !has_test(e.name))
    throw SyntaxError(where, e.line, fmt::format("unsupported test '{}'", e.name));
  soft = soft || e.kind == Expr::Kind::kCond;
  for (const ExprPtr* x : {&e.a, &e.b, &e.c})
    if (*x) validate(**x, where, soft);
  for (const ExprPtr& x : e.args)
    if (x) validate(*x, where, soft);
  for (const auto& [k, x] : e.kwargs)
    if (x) validate(*x, where, soft);
  for (const auto& [k, x] : e.ops)
    if (x) validate(*x, where, soft);
}

void validate(const Body& body, const std::string& where, bool soft) {
  for (const StmtPtr& s : body) {
    // What a statement evaluates in the frame it stands in: an output, a for's iterable, a set's
    // value, a call block's call. The rest (a for's body and loop filter, a macro, the blocks) is
    // a frame of its own.
    if (s->expr) validate(*s->expr, where, soft);
    if (s->filter) validate(*s->filter, where, false);
    for (const auto& [cond, b] : s->branches) {
      validate(*cond, where, true);
      validate(b, where, true);
    }
    for (const auto& [name, def] : s->params)
      if (def) validate(*def, where, false);
    validate(s->body, where, false);
    validate(s->else_body, where, s->kind == Stmt::Kind::kIf);  // an if's else, or a for's
  }
}

}  // namespace

Program Program::parse(const std::string& text, const std::string& where, const SyntaxOptions& options) {
  std::string source;
  Body body = parse_template(text, where, options, &source);
  return compile(std::move(body), where, std::move(source));
}

Program Program::compile(Body body, const std::string& where, std::string source) {
  Program p;
  p.where_ = where;
  p.source_ = std::make_shared<const std::string>(std::move(source));
  auto owned = std::make_shared<Body>(std::move(body));
  validate(*owned, where, /*soft=*/false);
  p.frames_ = std::make_shared<const FrameUndefined>(analyze_frames(*owned));
  p.body_ = std::move(owned);
  return p;
}

namespace {

std::shared_ptr<Scope> globals_of(Program::Variables variables) {
  auto globals = std::make_shared<Scope>();
  globals->vars = std::move(variables);
  return globals;
}

}  // namespace

std::string Program::render(const Value& context, const RenderOptions& options) const {
  Variables variables;
  if (context.is_dict()) {
    variables.reserve(context.as_dict().entries.size());
    for (const auto& [k, v] : context.as_dict().entries)  // a dict's keys are unique
      if (k.is_string()) variables.emplace_back(k.as_string(), v);
  }
  return render(std::move(variables), options);
}

std::string Program::render(Variables variables, const RenderOptions& options) const {
  Interpreter interpreter(options, *frames_, *source_);
  std::string out;
  interpreter.exec(*body_, interpreter.frame(globals_of(std::move(variables)), *body_), out);
  return out;
}

bool Program::is_single_output() const { return body_->size() == 1 && (*body_)[0]->kind == Stmt::Kind::kOutput; }

Value Program::output_value(Variables variables, const RenderOptions& options) const {
  if (!is_single_output()) throw std::logic_error("Program::output_value of a template that is not one expression");
  Interpreter interpreter(options, *frames_, *source_);
  return interpreter.evaluate(*(*body_)[0]->expr, interpreter.frame(globals_of(std::move(variables)), *body_));
}

}  // namespace gpueval::jinja
