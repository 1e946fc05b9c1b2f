// The syntax tree of a parsed Jinja2 template (jinja/parser.h builds it, jinja/engine.h runs
// it): expressions (Expr) and statements (Stmt), each with the template line it starts on.
// Immutable after parsing and shared freely between threads. Calls common only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace gpueval::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::shared_ptr<const Expr>;
using StmtPtr = std::shared_ptr<const Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    kConst,  // value
    kName,  // name
    kGetattr,  // a: object; name
    kGetitem,  // a: object, b: key
    kSlice,  // a: object, args: start, stop, step (null when absent)
    kCall,  // a: callee; args, kwargs
    kFilter,  // a: operand (null inside {% filter %}); name; args, kwargs
    kTest,  // a: operand; name; args; negated
    kNot,  // a
    kNeg,  // a
    kPos,  // a
    kBinary,  // name: + - * / // % ** ~ and or; a, b
    kCompare,  // a: first operand; ops: (operator, operand) pairs: == != < > <= >= in notin
    kCond,  // a: value, b: condition, c: else value (null: undefined)
    kList,  // args
    kTuple,  // args
    kDict,  // pairs in args: key, value, key, value, ...
  };
  Kind kind = Kind::kConst;
  int line = 1;
  Value value;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<std::string, ExprPtr>> ops;
  bool negated = false;
  int depth = 1;  // 1 + the deepest operand's: bounds the evaluator's recursion
  // The expression as written ("choices.text[5]"): [begin, end) of the text parse_template read
  // (begin npos: unknown, as inside parentheses). Offsets, not a copy: a deep expression's nodes
  // would otherwise hold its text once per level.
  size_t begin = std::string::npos, end = 0;
};

struct Stmt {
  enum class Kind {
    kText,  // text
    kOutput,  // expr
    kIf,  // branches (condition, body), else_body
    kFor,  // targets, expr: iterable, filter, body, else_body
    kSet,  // targets (or namespace + attr), expr
    kSetBlock,  // targets[0], body, filter (may be null: applied to the body)
    kMacro,  // name, params (name, default or null), body
    kCallBlock,  // expr: the call; name "caller", params and body: the caller macro the call is given
    kFilterBlock,  // filter (Expr kFilter chain whose innermost operand is null), body
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 1;
  std::string text;
  ExprPtr expr, filter;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace: targets[0] is the namespace, attr the attribute
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;
};

}  // namespace gpueval::jinja
