#include "gpueval/template.h"

#include <functional>
#include <unordered_set>

#include <fmt/format.h>

#include "common/strict_json.h"
#include "gpueval/error.h"
#include "jinja/engine.h"

namespace gpueval {
namespace {

using jinja::Expr;
using jinja::Stmt;

// The task-file subset, one row per name (gpueval/template.h); widening it is a row here.
constexpr const char* kFilters[] = {"int", "join", "lower", "upper", "trim", "length", "string", "first", "last"};
constexpr const char* kTests[] = {"defined", "undefined", "none", "string", "number"};
constexpr const char* kSubset =
    "gpueval's Jinja subset: fields, literals, [lists], slices, + - * / // % ** ~, "
    "str/list methods, the filters int, join, lower, upper, trim, length, string, first, last, "
    "the tests defined, undefined, none, string, number, not/and/or and 'a if c else b'";

template <size_t N>
bool listed(const char* const (&names)[N], const std::string& name) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

// The construct of `e` (not its operands) outside the subset, described for a message; empty
// when it is inside.
std::string outside_subset(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kCompare: {
      const std::string& op = e.ops.front().first;
      if (op == "in") return "the operator 'in'";
      if (op == "notin") return "the operator 'not in'";
      return fmt::format("the comparison '{}'", op);
    }
    case Expr::Kind::kDict: return "a dict literal";
    case Expr::Kind::kTuple: return "a tuple literal";
    case Expr::Kind::kCall:
      if (e.a->kind == Expr::Kind::kName) return fmt::format("the function call '{}()'", e.a->name);
      if (e.a->kind != Expr::Kind::kGetattr) return "calling the value of an expression";
      break;
    case Expr::Kind::kFilter:
      if (!listed(kFilters, e.name)) return fmt::format("the filter '{}'", e.name);
      break;
    case Expr::Kind::kTest:
      if (!listed(kTests, e.name)) return fmt::format("the test '{}'", e.name);
      if (!e.args.empty() || !e.kwargs.empty()) return fmt::format("the test '{}' with arguments", e.name);
      break;
    case Expr::Kind::kCond:
      if (!e.c) return "a conditional expression without its 'else' part";
      break;
    default: break;
  }
  if (!e.kwargs.empty()) return fmt::format("the keyword argument '{}='", e.kwargs.front().first);
  return "";
}

// Every expression of `e`'s tree, `e` first (the parser bounds its depth).
void for_each_expression(const Expr& e, const std::function<void(const Expr&)>& visit) {
  visit(e);
  for (const jinja::ExprPtr* x : {&e.a, &e.b, &e.c})
    if (*x) for_each_expression(**x, visit);
  for (const jinja::ExprPtr& x : e.args)
    if (x) for_each_expression(*x, visit);
  for (const auto& [name, x] : e.kwargs)
    if (x) for_each_expression(*x, visit);
  for (const auto& [op, x] : e.ops) for_each_expression(*x, visit);
}

const char* statement_name(const Stmt& s) {
  switch (s.kind) {
    case Stmt::Kind::kFor: return "for";
    case Stmt::Kind::kSet:
    case Stmt::Kind::kSetBlock: return "set";
    case Stmt::Kind::kMacro: return "macro";
    case Stmt::Kind::kCallBlock: return "call";
    case Stmt::Kind::kFilterBlock: return s.filter ? "filter" : "generation";
    case Stmt::Kind::kBreak: return "break";
    case Stmt::Kind::kContinue: return "continue";
    default: return nullptr;
  }
}

// Every statement of `body` (nested ones after the one holding them) and every expression in them.
void for_each_part(const jinja::Body& body, const std::function<void(const Stmt&)>& statement,
                   const std::function<void(const Expr&)>& expression) {
  for (const jinja::StmtPtr& s : body) {
    statement(*s);
    if (s->expr) for_each_expression(*s->expr, expression);
    if (s->filter) for_each_expression(*s->filter, expression);
    for (const auto& [condition, branch] : s->branches) {
      for_each_expression(*condition, expression);
      for_each_part(branch, statement, expression);
    }
    for_each_part(s->body, statement, expression);
    for_each_part(s->else_body, statement, expression);
  }
}

// Refuses (through `refuse`) the first statement or expression outside the subset.
void check_subset(const jinja::Body& body, const std::function<void(const std::string&)>& refuse) {
  for_each_part(
      body,
      [&](const Stmt& s) {
        if (const char* name = statement_name(s))
          refuse(fmt::format(
              "a '{{% {} %}}' statement is not supported (gpueval's templates have if/elif/else/endif only)", name));
      },
      [&](const Expr& e) {
        if (const std::string what = outside_subset(e); !what.empty())
          refuse(what + " is not supported (" + kSubset + ")");
      });
}

// The names the template reads, each once, in the order first read: in a task file (no set, for
// or macro) each is a field of the document.
std::vector<std::string> names_read(const jinja::Body& body) {
  std::vector<std::string> names;
  std::unordered_set<std::string> seen;
  for_each_part(
      body, [](const Stmt&) {},
      [&](const Expr& e) {
        if (e.kind == Expr::Kind::kName && seen.insert(e.name).second) names.push_back(e.name);
      });
  return names;
}

// lm-eval's Environment(undefined=StrictUndefined, keep_trailing_newline=True).
jinja::SyntaxOptions lm_eval_syntax() {
  jinja::SyntaxOptions syntax;
  syntax.keep_trailing_newline = true;
  return syntax;
}

// The parser's words for a tag never closed, as task files have always said it.
std::string task_wording(const std::string& reason) {
  static const std::pair<const char*, const char*> kWords[] = {
      {"unexpected end of template, expected '}}'", "'{{' without a closing '}}'"},
      {"unexpected end of template, expected '%}'", "'{%' without a closing '%}'"},
      {"missing end of comment tag ('#}')", "'{#' without a closing '#}'"},
  };
  for (const auto& [parser, task] : kWords)
    if (reason == parser) return task;
  return reason;
}

const jinja::RenderOptions& task_rendering() {
  static const jinja::RenderOptions options = [] {
    jinja::RenderOptions o;
    o.strict_undefined = true;
    o.name_missing_fields = true;
    return o;
  }();
  return options;
}

}  // namespace

Template Template::parse(const std::string& text, const std::string& name, const std::string& where) {
  Template t;
  t.text_ = text;
  t.name_ = name;
  auto refuse = [&](const std::string& what) { fail(where, "{} {}: {}", name, quote_untrusted(text), what); };
  jinja::Body body;
  std::string source;
  try {
    body = jinja::parse_template(text, where, lm_eval_syntax(), &source);
  } catch (const jinja::SyntaxError& e) {
    const std::string reason = task_wording(e.reason());
    refuse(e.line() > 1 ? fmt::format("line {}: {}", e.line(), reason) : reason);
  }
  check_subset(body, refuse);
  t.fields_ = names_read(body);
  t.program_ =
      std::make_shared<const jinja::Program>(jinja::Program::compile(std::move(body), where, std::move(source)));
  return t;
}

bool Template::is_single_expression() const { return program_->is_single_output(); }

void Template::fail_rendering(const std::string& where) const {
  try {
    throw;
  } catch (const jinja::RenderError& e) {
    if (!e.field().empty())
      fail(where, "{} {} references missing field '{}'", name_, quote_untrusted(text_), e.field());
    fail(where, "{} {}: {}{}", name_, quote_untrusted(text_), e.message(), e.hint());
  }
}

jinja::Program::Variables Template::variables(const nlohmann::json& doc) const {
  jinja::Program::Variables out;
  if (!doc.is_object()) return out;
  out.reserve(fields_.size());
  for (const std::string& name : fields_) {
    const auto it = doc.find(name);
    if (it != doc.end()) out.emplace_back(name, jinja::Value::from_json(*it));
  }
  return out;
}

std::string Template::render(const nlohmann::json& doc, const std::string& where) const {
  try {
    return program_->render(variables(doc), task_rendering());
  } catch (const jinja::RenderError&) {
    fail_rendering(where);
  }
}

nlohmann::json Template::value(const nlohmann::json& doc, const std::string& where) const {
  if (!is_single_expression()) return render(doc, where);
  try {
    return jinja::to_json(program_->output_value(variables(doc), task_rendering()));
  } catch (const jinja::RenderError&) {
    fail_rendering(where);
  }
}

std::optional<nlohmann::json> python_literal(const std::string& text) {
  // Parsed as a template expression, then kept only when it is literals all the way down.
  std::function<bool(const Expr&)> literal = [&](const Expr& e) {
    if (e.kind == Expr::Kind::kConst) return true;
    if (e.kind == Expr::Kind::kNeg || e.kind == Expr::Kind::kPos) return e.a->kind == Expr::Kind::kConst;
    if (e.kind != Expr::Kind::kList) return false;
    for (const jinja::ExprPtr& x : e.args)
      if (!literal(*x)) return false;
    return true;
  };
  try {
    jinja::Body body = jinja::parse_template("{{ " + text + " }}", "literal", jinja::SyntaxOptions());
    if (body.size() != 1 || body[0]->kind != Stmt::Kind::kOutput || !literal(*body[0]->expr)) return std::nullopt;
    const jinja::Program program = jinja::Program::compile(std::move(body), "literal");
    return jinja::to_json(program.output_value({}, task_rendering()));
  } catch (const Error&) {
    return std::nullopt;
  } catch (const jinja::RenderError&) {
    return std::nullopt;
  }
}

}  // namespace gpueval
