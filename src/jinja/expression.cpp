#include "jinja/expression.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "common/python_format.h"
#include "common/python_str.h"
#include "common/strict_json.h"

namespace gpueval::jinja {

using nlohmann::json;
using NodePtr = std::shared_ptr<const Node>;

struct Node {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kAttr,
    kItem,
    kSlice,
    kMethod,
    kFilter,
    kBinary,
    kNeg,
    kTest,
    kNot,
    kAnd,
    kOr,
    kIf
  };
  Kind kind = Kind::kLiteral;
  json literal;  // kLiteral
  std::string name;  // kName, kAttr, kMethod, kFilter, kTest: the name; kBinary: the operator
  std::vector<NodePtr> args;  // the operand first, then arguments; a slice's absent bounds are null;
                              // kIf: the value, the condition, the else value
  bool negated = false;  // kTest: `is not`
  std::string source;  // the expression as written, for messages
  int depth = 1;  // 1 + the deepest argument's: bounds the evaluator's recursion
};

namespace {

using Fail = std::function<void(const std::string&)>;

// ------------------------------------------------------------------------------------------ lexer

struct Token {
  enum class Kind { kName, kInt, kFloat, kString, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // name, operator, or the string literal's value
  size_t begin = 0;  // offset in the source
};

std::vector<Token> tokenize(const std::string& s, const Fail& refuse) {
  std::vector<Token> out;
  size_t p = 0;
  auto is_name_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
  auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto is_digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  while (true) {
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
    Token t;
    t.begin = p;
    if (p >= s.size()) {
      out.push_back(t);
      return out;
    }
    const char c = s[p];
    if (is_name_start(c)) {
      t.kind = Token::Kind::kName;
      while (p < s.size() && is_name_char(s[p])) t.text += s[p++];
    } else if (is_digit(c)) {
      t.kind = Token::Kind::kInt;
      while (p < s.size() && (is_digit(s[p]) || s[p] == '_')) t.text += s[p++];
      // A fraction only when a digit follows the dot: `a.0.1` is two subscripts.
      if (p + 1 < s.size() && s[p] == '.' && is_digit(s[p + 1]) && (out.empty() || out.back().text != ".")) {
        t.kind = Token::Kind::kFloat;
        t.text += s[p++];
        while (p < s.size() && is_digit(s[p])) t.text += s[p++];
      }
    } else if (c == '\'' || c == '"') {
      t.kind = Token::Kind::kString;
      ++p;
      bool closed = false;
      while (p < s.size()) {
        char ch = s[p++];
        if (ch == c) {
          closed = true;
          break;
        }
        if (ch == '\\' && p < s.size()) {
          const char e = s[p++];
          switch (e) {
            case 'n': t.text += '\n'; break;
            case 't': t.text += '\t'; break;
            case 'r': t.text += '\r'; break;
            case '\\': t.text += '\\'; break;
            case '\'': t.text += '\''; break;
            case '"': t.text += '"'; break;
            default:
              t.text += '\\';
              t.text += e;
              break;  // Python keeps unknown escapes as written
          }
          continue;
        }
        t.text += ch;
      }
      if (!closed) refuse("the unterminated string literal " + s.substr(t.begin));
    } else {
      static const char* const kOps[] = {"//", "==", "!=", "<=", ">=", "**", "(", ")", "[", "]", ",", ".", "|",
                                         "+",  "-",  "*",  "/",  "%",  "~",  ":", "<", ">", "=", "{", "}"};
      for (const char* op : kOps) {
        const size_t n = std::char_traits<char>::length(op);
        if (s.compare(p, n, op) == 0) {
          t.kind = Token::Kind::kOp;
          t.text = op;
          p += n;
          break;
        }
      }
      if (t.kind != Token::Kind::kOp) refuse(fmt::format("the character '{}'", std::string(1, c)));
    }
    out.push_back(std::move(t));
  }
}

// ------------------------------------------------------------------------------------------ parser

constexpr const char* kFilters[] = {"int", "join", "lower", "upper", "trim", "length", "string", "first", "last"};
constexpr const char* kTests[] = {"defined", "undefined", "none", "string", "number"};
constexpr const char* kSubset =
    "gpueval's Jinja subset: fields, literals, [lists], slices, + - * / // % ~, "
    "str/list methods, the filters int, join, lower, upper, trim, length, string, first, last, "
    "the tests defined, undefined, none, string, number, not/and/or and 'a if c else b'";

class Parser {
 public:
  Parser(const std::string& source, const Fail& refuse) : source_(source), refuse_(refuse) {
    tokens_ = tokenize(source, refuse);
  }

  NodePtr parse() {
    NodePtr e = expression();
    if (peek().kind != Token::Kind::kEnd) unexpected();
    return e;
  }

 private:
  const Token& peek() const { return tokens_[pos_]; }
  bool at_op(const char* op) const { return peek().kind == Token::Kind::kOp && peek().text == op; }
  Token take() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  void expect(const char* op) {
    if (!at_op(op)) unexpected(std::string(" (expected '") + op + "')");
  }

  [[noreturn]] void unexpected(const std::string& why = "") {
    const Token& t = peek();
    static const std::vector<std::string> kComparisons = {"==", "!=", "<", ">", "<=", ">=", "="};
    if (t.kind == Token::Kind::kOp) {
      for (const auto& c : kComparisons) {
        if (t.text == c) refuse(fmt::format("the comparison '{}'", c));
      }
      if (t.text == "**") refuse("the operator '**'");
      if (t.text == "{" || t.text == "}") refuse("a dict literal");
    }
    if (t.kind == Token::Kind::kName && t.text == "in") refuse("the operator 'in'");
    // The source is quoted as untrusted text: it may hold newlines (found by fuzz_template).
    if (t.kind == Token::Kind::kEnd)
      refuse("the expression " + quote_untrusted(source_) + " (it ends too early" + why + ")");
    refuse(fmt::format("the expression {} (unexpected {} at offset {}{})", quote_untrusted(source_),
                       t.kind == Token::Kind::kString ? py::repr(json(t.text)) : quote_untrusted(t.text), t.begin,
                       why));
  }
  [[noreturn]] void refuse(const std::string& what) {
    refuse_(what);
    throw std::logic_error("refuse() returned");
  }

  std::string text_from(size_t begin_token) const {
    const size_t begin = tokens_[begin_token].begin;
    const size_t end = pos_ < tokens_.size() ? tokens_[pos_].begin : source_.size();
    std::string s = source_.substr(begin, end - begin);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    return s;
  }

  NodePtr make(Node::Kind kind, std::string name, std::vector<NodePtr> args, size_t begin_token, json literal = {},
               bool negated = false) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->negated = negated;
    n->name = std::move(name);
    n->args = std::move(args);
    for (const NodePtr& a : n->args)
      if (a) n->depth = std::max(n->depth, a->depth + 1);
    if (n->depth > kMaxDepth) refuse(fmt::format("an expression more than {} operations deep", kMaxDepth));
    n->literal = std::move(literal);
    n->source = text_from(begin_token);
    return n;
  }

  bool at_name(const char* name) const { return peek().kind == Token::Kind::kName && peek().text == name; }

  // Jinja's conditional expression `a if cond else b` (the else part is required: Jinja's
  // undefined would render as an empty string), over `or`, `and`, `not`.
  NodePtr expression() {
    struct Nesting {
      int& n;
      explicit Nesting(int& depth) : n(++depth) {}
      ~Nesting() { --n; }
    } nesting(conditionals_);
    // A chain `a if b else c if d else ...` nests here: bounded as brackets are.
    if (conditionals_ - 1 > kMaxNesting) refuse(fmt::format("brackets nested more than {} deep", kMaxNesting));
    const size_t begin = pos_;
    NodePtr value = or_test();
    if (!at_name("if")) return value;
    take();
    NodePtr condition = or_test();
    if (!at_name("else")) unexpected(" (a conditional expression needs its 'else' part)");
    take();
    NodePtr otherwise = expression();
    return make(Node::Kind::kIf, "", {value, condition, otherwise}, begin);
  }
  NodePtr or_test() {
    const size_t begin = pos_;
    NodePtr lhs = and_test();
    while (at_name("or")) {
      take();
      lhs = make(Node::Kind::kOr, "or", {lhs, and_test()}, begin);
    }
    return lhs;
  }
  NodePtr and_test() {
    const size_t begin = pos_;
    NodePtr lhs = not_test();
    while (at_name("and")) {
      take();
      lhs = make(Node::Kind::kAnd, "and", {lhs, not_test()}, begin);
    }
    return lhs;
  }
  NodePtr not_test() {
    std::vector<size_t> nots;  // where each `not` begins; read in a loop, not by recursion
    while (at_name("not")) {
      nots.push_back(pos_);
      take();
    }
    NodePtr operand = additive();
    for (auto it = nots.rbegin(); it != nots.rend(); ++it) operand = make(Node::Kind::kNot, "not", {operand}, *it);
    return operand;
  }

  // + and - (Jinja's math1), over ~ (concat), over * / // % (math2), over unary. Every nested
  // expression (parentheses, list items, arguments, subscripts) comes through here: its depth
  // is bounded, so a deep template is refused rather than overflowing the stack.
  NodePtr additive() {
    struct Nesting {
      int& n;
      explicit Nesting(int& depth) : n(++depth) {}
      ~Nesting() { --n; }
    } nesting(nesting_);
    if (nesting_ - 1 > kMaxNesting) refuse(fmt::format("brackets nested more than {} deep", kMaxNesting));
    const size_t begin = pos_;
    NodePtr lhs = concat();
    while (at_op("+") || at_op("-")) {
      const std::string op = take().text;
      NodePtr rhs = concat();
      lhs = make(Node::Kind::kBinary, op, {lhs, rhs}, begin);
    }
    return lhs;
  }
  NodePtr concat() {
    const size_t begin = pos_;
    NodePtr lhs = multiplicative();
    while (at_op("~")) {
      take();
      NodePtr rhs = multiplicative();
      lhs = make(Node::Kind::kBinary, "~", {lhs, rhs}, begin);
    }
    return lhs;
  }
  NodePtr multiplicative() {
    const size_t begin = pos_;
    NodePtr lhs = unary();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const std::string op = take().text;
      NodePtr rhs = unary();
      lhs = make(Node::Kind::kBinary, op, {lhs, rhs}, begin);
    }
    return lhs;
  }
  NodePtr unary() {
    const size_t begin = pos_;
    if (at_op("-")) {
      take();
      const size_t operand_begin = pos_;
      NodePtr operand = postfix(primary(), operand_begin);
      return filters(make(Node::Kind::kNeg, "-", {operand}, begin), begin);
    }
    return filters(postfix(primary(), begin), begin);
  }

  NodePtr filters(NodePtr node, size_t begin) {
    while (at_op("|") || at_name("is")) {
      if (at_name("is")) {
        // Jinja's tests bind as tightly as filters: `a ~ b is defined` tests b.
        take();
        bool negated = false;
        if (at_name("not")) {
          take();
          negated = true;
        }
        if (peek().kind != Token::Kind::kName) unexpected(" (a test name must follow 'is')");
        const std::string test = take().text;
        bool known = false;
        for (const char* t : kTests) known = known || test == t;
        if (!known) refuse(fmt::format("the test '{}'", test));
        if (at_op("(")) refuse(fmt::format("arguments to the test '{}'", test));
        node = make(Node::Kind::kTest, test, {node}, begin, {}, negated);
        continue;
      }
      take();
      if (peek().kind != Token::Kind::kName) unexpected(" (a filter name must follow '|')");
      const std::string name = take().text;
      bool known = false;
      for (const char* f : kFilters) known = known || name == f;
      if (!known) refuse(fmt::format("the filter '{}'", name));
      std::vector<NodePtr> args = {node};
      if (at_op("(")) {
        for (NodePtr& a : call_arguments()) args.push_back(std::move(a));
      }
      node = make(Node::Kind::kFilter, name, std::move(args), begin);
    }
    return node;
  }

  std::vector<NodePtr> call_arguments() {
    expect("(");
    take();
    std::vector<NodePtr> args;
    while (!at_op(")")) {
      if (peek().kind == Token::Kind::kName && pos_ + 1 < tokens_.size() && tokens_[pos_ + 1].text == "=" &&
          tokens_[pos_ + 1].kind == Token::Kind::kOp) {
        refuse(fmt::format("the keyword argument '{}='", peek().text));
      }
      args.push_back(additive());
      if (at_op(",")) {
        take();
        continue;
      }
      expect(")");
    }
    take();
    return args;
  }

  NodePtr primary() {
    const size_t begin = pos_;
    const Token t = peek();
    switch (t.kind) {
      case Token::Kind::kName: {
        take();
        if (t.text == "true" || t.text == "True") return literal(json(true), begin);
        if (t.text == "false" || t.text == "False") return literal(json(false), begin);
        if (t.text == "none" || t.text == "None") return literal(json(), begin);
        if (at_op("(")) refuse(fmt::format("the function call '{}()'", t.text));
        return make(Node::Kind::kName, t.text, {}, begin);
      }
      case Token::Kind::kInt: {
        take();
        std::string digits;
        for (const char c : t.text) {
          if (c != '_') digits += c;
        }
        try {
          return literal(json(static_cast<int64_t>(std::stoll(digits))), begin);
        } catch (const std::out_of_range&) {
          refuse("the integer " + t.text + " (too large)");
        }
      }
      case Token::Kind::kFloat:
        take();
        try {
          return literal(json(std::stod(t.text)), begin);
        } catch (const std::out_of_range&) {  // 1e999 (found by fuzz_template)
          refuse("the number " + t.text + " (out of range)");
        }
      case Token::Kind::kString: take(); return literal(json(t.text), begin);
      case Token::Kind::kOp:
        if (t.text == "(") {
          take();
          NodePtr inner = expression();
          if (at_op(",")) refuse("a tuple literal");
          expect(")");
          take();
          return inner;
        }
        if (t.text == "[") {
          take();
          std::vector<NodePtr> items;
          while (!at_op("]")) {
            items.push_back(additive());
            if (at_op(",")) {
              take();
              continue;
            }
            expect("]");
          }
          take();
          return make(Node::Kind::kList, "", std::move(items), begin);
        }
        unexpected();
      case Token::Kind::kEnd: unexpected();
    }
    unexpected();
  }

  NodePtr literal(json value, size_t begin) { return make(Node::Kind::kLiteral, "", {}, begin, std::move(value)); }

  // .name, .0, [expr], [a:b:c] and method calls .name(args).
  NodePtr postfix(NodePtr node, size_t start) {
    while (true) {
      if (at_op(".")) {
        take();
        const Token t = take();
        if (t.kind == Token::Kind::kInt) {
          int64_t index = 0;
          try {
            index = static_cast<int64_t>(std::stoll(t.text));
          } catch (const std::out_of_range&) {  // x.99999999999999999999 (found by fuzz_template)
            refuse("the index " + t.text + " (too large)");
          }
          node = make(Node::Kind::kItem, "", {node, literal(json(index), pos_ - 1)}, start);
          continue;
        }
        if (t.kind != Token::Kind::kName) unexpected(" (a name must follow '.')");
        if (at_op("(")) {
          std::vector<NodePtr> args = {node};
          for (NodePtr& a : call_arguments()) args.push_back(std::move(a));
          node = make(Node::Kind::kMethod, t.text, std::move(args), start);
        } else {
          node = make(Node::Kind::kAttr, t.text, {node}, start);
        }
      } else if (at_op("[")) {
        take();
        NodePtr bounds[3] = {nullptr, nullptr, nullptr};
        bool is_slice = false;
        for (int part = 0; part < 3; ++part) {
          if (!at_op(":") && !at_op("]")) bounds[part] = additive();
          if (at_op(":") && part < 2) {
            take();
            is_slice = true;
            continue;
          }
          break;
        }
        expect("]");
        take();
        if (is_slice) {
          node = make(Node::Kind::kSlice, "", {node, bounds[0], bounds[1], bounds[2]}, start);
        } else {
          if (!bounds[0]) unexpected(" (an empty subscript)");
          node = make(Node::Kind::kItem, "", {node, bounds[0]}, start);
        }
      } else if (at_op("(")) {
        refuse("calling '" + node->source + "'");
      } else {
        return node;
      }
    }
  }

  const std::string& source_;
  const Fail& refuse_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int conditionals_ = 0;  // conditional expressions open (an else part's chain)
  // Far beyond any task file's template (lm-eval's deepest nest a few brackets and chain a few
  // operators), and far within the stack.
  static constexpr int kMaxNesting = 64;
  static constexpr int kMaxDepth = 256;
};

// ------------------------------------------------------------------------------------------ evaluation

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::string: return "str";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "int";
    case json::value_t::number_float: return "float";
    case json::value_t::boolean: return "bool";
    case json::value_t::null: return "NoneType";
    case json::value_t::array: return "list";
    case json::value_t::object: return "dict";
    default: return "object";
  }
}

bool is_int(const json& v) { return v.is_number_integer() || v.is_boolean(); }
bool is_number(const json& v) { return v.is_number() || v.is_boolean(); }
int64_t as_int(const json& v) { return v.is_boolean() ? (v.get<bool>() ? 1 : 0) : v.get<int64_t>(); }
double as_double(const json& v) { return v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>(); }

// Python's == between JSON-shaped values (1 == 1.0 == True).
bool py_equal(const json& a, const json& b) {
  if (is_number(a) && is_number(b)) {
    if (is_int(a) && is_int(b)) return as_int(a) == as_int(b);
    return as_double(a) == as_double(b);
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!py_equal(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

// Jinja's int filter: int(x) for strings and numbers, int(float(x)) when that fails, else 0.
json to_int(const json& v) {
  if (is_int(v)) return as_int(v);
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::isfinite(d) ? json(static_cast<int64_t>(std::trunc(d))) : json(0);
  }
  if (!v.is_string()) return 0;
  std::string s = py::strip(v.get<std::string>());
  std::string digits;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) digits += s[i++];
  bool ok = i < s.size();
  bool last_underscore = true;  // no leading underscore
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !last_underscore) {
      last_underscore = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) {
      ok = false;
      break;
    }
    digits += s[i];
    last_underscore = false;
  }
  ok = ok && !last_underscore;
  if (ok) {
    try {
      return static_cast<int64_t>(std::stoll(digits));
    } catch (const std::out_of_range&) {
      return 0;
    }
  }
  try {
    size_t used = 0;
    const double d = std::stod(s, &used);
    // Only doubles inside int64's range convert; past it the cast is undefined behaviour.
    if (used == s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) return static_cast<int64_t>(std::trunc(d));
  } catch (const std::exception&) {}
  return 0;
}

class Evaluator {
 public:
  Evaluator(const json& doc, const Fail& fail) : doc_(doc), fail_(fail) {}

  json eval(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kLiteral: return n.literal;
      case Node::Kind::kName: {
        if (!doc_.is_object() || !doc_.contains(n.name)) missing(n);
        return doc_.at(n.name);
      }
      case Node::Kind::kList: {
        json out = json::array();
        for (const NodePtr& a : n.args) out.push_back(eval(*a));
        return out;
      }
      case Node::Kind::kAttr: {
        const json obj = eval(*n.args[0]);
        if (obj.is_object()) {
          const auto it = obj.find(n.name);
          if (it == obj.end()) missing(n);
          return *it;
        }
        error(fmt::format("{} ({}) has no attribute '{}'", n.args[0]->source, type_name(obj), n.name));
      }
      case Node::Kind::kItem: return item(n, eval(*n.args[0]), eval(*n.args[1]));
      case Node::Kind::kSlice: return slice(n);
      case Node::Kind::kMethod: return method(n);
      case Node::Kind::kFilter: return filter(n);
      case Node::Kind::kBinary: return binary(n.name, eval(*n.args[0]), eval(*n.args[1]));
      case Node::Kind::kTest: return test(n) != n.negated;
      case Node::Kind::kNot: return !truthy(eval(*n.args[0]));
      case Node::Kind::kAnd: {  // Python's: the first falsy operand, else the last
        json lhs = eval(*n.args[0]);
        return truthy(lhs) ? eval(*n.args[1]) : lhs;
      }
      case Node::Kind::kOr: {
        json lhs = eval(*n.args[0]);
        return truthy(lhs) ? lhs : eval(*n.args[1]);
      }
      case Node::Kind::kIf: return truthy(eval(*n.args[1])) ? eval(*n.args[0]) : eval(*n.args[2]);
      case Node::Kind::kNeg: {
        const json v = eval(*n.args[0]);
        if (is_int(v)) return -as_int(v);
        if (v.is_number_float()) return -v.get<double>();
        error(fmt::format("bad operand type for unary -: '{}'", type_name(v)));
      }
    }
    error("unknown expression");
  }

 private:
  [[noreturn]] void error(const std::string& message) {
    fail_(": " + message);
    throw std::logic_error("fail() returned");
  }

  // Whether `n` names something that exists (Jinja's `is defined`), without failing on a
  // missing field, key or index; other expressions are evaluated and are defined.
  bool defined(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kName: return doc_.is_object() && doc_.contains(n.name);
      case Node::Kind::kAttr: {
        if (!defined(*n.args[0])) return false;
        const json obj = eval(*n.args[0]);
        return obj.is_object() && obj.contains(n.name);
      }
      case Node::Kind::kItem: {
        if (!defined(*n.args[0])) return false;
        const json obj = eval(*n.args[0]);
        const json key = eval(*n.args[1]);
        if (obj.is_object()) return obj.contains(key.is_string() ? key.get<std::string>() : py::str(key));
        if ((obj.is_array() || obj.is_string()) && is_int(key)) {
          const int64_t size = obj.is_array() ? static_cast<int64_t>(obj.size())
                                              : static_cast<int64_t>(py::code_points(obj.get<std::string>()).size());
          const int64_t i = as_int(key);
          return i >= -size && i < size;
        }
        eval(n);  // the error Jinja would raise
        return true;
      }
      default: eval(n); return true;
    }
  }

  bool test(const Node& n) {
    const std::string& t = n.name;
    if (t == "defined") return defined(*n.args[0]);
    if (t == "undefined") return !defined(*n.args[0]);
    const json v = eval(*n.args[0]);
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number() || v.is_boolean();  // Python's bool is a Number
    error(fmt::format("unknown test '{}'", t));
  }

  [[noreturn]] void missing(const Node& n) {
    fail_(" references missing field '" + n.source + "'");
    throw std::logic_error("fail() returned");
  }

  json item(const Node& n, const json& obj, const json& key) {
    if (obj.is_object()) {
      const std::string k = key.is_string() ? key.get<std::string>() : py::str(key);
      const auto it = obj.find(k);
      if (it == obj.end()) missing(n);
      return *it;
    }
    if (!is_int(key)) error(fmt::format("{} indices must be integers, not {}", type_name(obj), type_name(key)));
    int64_t i = as_int(key);
    if (obj.is_array()) {
      const int64_t size = static_cast<int64_t>(obj.size());
      if (i < 0) i += size;
      if (i < 0 || i >= size) missing(n);  // Jinja: undefined, which StrictUndefined reports
      return obj[static_cast<size_t>(i)];
    }
    if (obj.is_string()) {
      const auto c = py::char_at(obj.get<std::string>(), i);
      if (!c) missing(n);
      return *c;
    }
    error(fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }

  std::optional<int64_t> bound(const NodePtr& node) {
    if (!node) return std::nullopt;
    const json v = eval(*node);
    if (v.is_null()) return std::nullopt;
    if (!is_int(v)) error(fmt::format("slice indices must be integers or None, not {}", type_name(v)));
    return as_int(v);
  }

  json slice(const Node& n) {
    const json obj = eval(*n.args[0]);
    const std::optional<int64_t> start = bound(n.args[1]), stop = bound(n.args[2]), step_v = bound(n.args[3]);
    const int64_t step = step_v.value_or(1);
    if (step == 0) error("slice step cannot be zero");
    if (obj.is_string()) return py::slice(obj.get<std::string>(), start, stop, step);
    if (obj.is_array()) {
      json out = json::array();
      for (const int64_t i : py::slice_positions(static_cast<int64_t>(obj.size()), start, stop, step)) {
        out.push_back(obj[static_cast<size_t>(i)]);
      }
      return out;
    }
    error(fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }

  std::vector<json> arguments(const Node& n) {
    std::vector<json> out;
    for (size_t i = 1; i < n.args.size(); ++i) out.push_back(eval(*n.args[i]));
    return out;
  }

  const std::string& string_arg(const json& v, const std::string& what) {
    if (!v.is_string()) error(fmt::format("{} must be str, not {}", what, type_name(v)));
    return v.get_ref<const std::string&>();
  }

  void arity(const Node& n, const std::vector<json>& args, size_t low, size_t high) {
    if (args.size() < low || args.size() > high) {
      error(fmt::format("{}() takes {} argument{} ({} given)", n.name,
                        low == high ? std::to_string(low) : fmt::format("{} to {}", low, high), high == 1 ? "" : "s",
                        args.size()));
    }
  }

  json method(const Node& n) {
    const json obj = eval(*n.args[0]);
    const std::vector<json> args = arguments(n);
    const std::string& m = n.name;
    if (obj.is_string()) {
      const std::string& s = obj.get_ref<const std::string&>();
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        arity(n, args, 0, 1);
        std::optional<std::string> chars;
        if (!args.empty() && !args[0].is_null()) chars = string_arg(args[0], m + "() argument");
        return py::strip(s, chars, m != "rstrip", m != "lstrip");
      }
      if (m == "split") {
        arity(n, args, 0, 2);
        std::optional<std::string> sep;
        if (!args.empty() && !args[0].is_null()) {
          sep = string_arg(args[0], "split() separator");
          if (sep->empty()) error("split(): empty separator");
        }
        int64_t maxsplit = -1;
        if (args.size() == 2) {
          if (!is_int(args[1])) error("split() maxsplit must be an integer");
          maxsplit = as_int(args[1]);
        }
        json out = json::array();
        for (std::string& piece : py::split(s, sep, maxsplit)) out.push_back(std::move(piece));
        return out;
      }
      if (m == "lower" || m == "upper") {
        arity(n, args, 0, 0);
        return m == "lower" ? py::lower(s) : py::upper(s);
      }
      if (m == "replace") {
        arity(n, args, 2, 2);
        return py::replace(s, string_arg(args[0], "replace() argument 1"), string_arg(args[1], "replace() argument 2"));
      }
      if (m == "index" || m == "find") {
        arity(n, args, 1, 1);
        const int64_t at = py::find(s, string_arg(args[0], m + "() argument"));
        if (at < 0 && m == "index")
          error(fmt::format("{}.index({}): substring not found", n.args[0]->source, py::repr(args[0])));
        return at;
      }
      if (m == "startswith" || m == "endswith") {
        arity(n, args, 1, 1);
        const std::string& x = string_arg(args[0], m + "() argument");
        const bool hit = x.size() <= s.size() && (m == "startswith" ? s.compare(0, x.size(), x) == 0
                                                                    : s.compare(s.size() - x.size(), x.size(), x) == 0);
        return hit;
      }
    }
    if (obj.is_array()) {
      if (m == "index") {
        arity(n, args, 1, 1);
        for (size_t i = 0; i < obj.size(); ++i) {
          if (py_equal(obj[i], args[0])) return static_cast<int64_t>(i);
        }
        error(fmt::format("{} is not in list {}", py::repr(args[0]), py::repr(obj)));
      }
      if (m == "count") {
        arity(n, args, 1, 1);
        int64_t count = 0;
        for (const json& v : obj) count += py_equal(v, args[0]) ? 1 : 0;
        return count;
      }
    }
    error(fmt::format("{}.{}(): {} has no method '{}' in gpueval's Jinja subset", n.args[0]->source, m, type_name(obj),
                      m));
  }

  json filter(const Node& n) {
    const json v = eval(*n.args[0]);
    const std::vector<json> args = arguments(n);
    const std::string& f = n.name;
    auto no_args = [&] {
      if (!args.empty()) error(fmt::format("the filter '{}' takes no arguments", f));
    };
    if (f == "int") {
      no_args();
      return to_int(v);
    }
    if (f == "string") {
      no_args();
      return py::str(v);
    }
    if (f == "join") {
      if (args.size() > 1) error("the filter 'join' takes one argument (the separator)");
      const std::string sep = args.empty() ? "" : py::str(args[0]);
      std::vector<std::string> items;
      if (v.is_string()) {
        for (const char32_t c : py::code_points(v.get<std::string>())) items.push_back(py::utf8(std::u32string(1, c)));
      } else if (v.is_array()) {
        for (const json& item : v) items.push_back(py::str(item));
      } else {
        error(fmt::format("join of {} ({}), which is not a list", py::repr(v), type_name(v)));
      }
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
      return out;
    }
    if (f == "lower" || f == "upper" || f == "trim") {
      no_args();
      const std::string s = py::str(v);
      if (f == "trim") return py::strip(s, std::nullopt, true, true);
      return f == "lower" ? py::lower(s) : py::upper(s);
    }
    if (f == "length") {
      no_args();
      if (v.is_string()) return py::len(v.get<std::string>());
      if (v.is_array() || v.is_object()) return static_cast<int64_t>(v.size());
      error(fmt::format("object of type '{}' has no len()", type_name(v)));
    }
    if (f == "first" || f == "last") {
      no_args();
      if (v.is_array()) {
        if (v.empty()) missing(n);
        return f == "first" ? v.front() : v.back();
      }
      if (v.is_string()) {
        const auto c = py::char_at(v.get<std::string>(), f == "first" ? 0 : -1);
        if (!c) missing(n);
        return *c;
      }
      error(fmt::format("the filter '{}' of {} ({})", f, py::repr(v), type_name(v)));
    }
    error("unknown filter '" + f + "'");
  }

  // A template renders a prompt: a string past kMaxString is a runaway expression ("x" * 10**9),
  // refused before it is built rather than exhausting memory.
  static constexpr size_t kMaxString = size_t{16} << 20;
  void bound_string(const std::string& op, size_t bytes) {
    if (bytes > kMaxString)
      error(fmt::format("'{}' would make a string of {} bytes, over the {} MiB a template may render", op, bytes,
                        kMaxString >> 20));
  }

  json binary(const std::string& op, const json& a, const json& b) {
    if (op == "~") {
      std::string l = py::str(a), r = py::str(b);
      bound_string(op, l.size() + r.size());
      return l + r;
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        bound_string(op, a.get_ref<const std::string&>().size() + b.get_ref<const std::string&>().size());
        return a.get<std::string>() + b.get<std::string>();
      }
      if (a.is_array() && b.is_array()) {
        json out = a;
        for (const json& v : b) out.push_back(v);
        return out;
      }
    }
    if (is_number(a) && is_number(b)) {
      const bool ints = is_int(a) && is_int(b);
      if (op == "/") {
        if (as_double(b) == 0) error("division by zero");
        return as_double(a) / as_double(b);
      }
      if (ints) {
        const int64_t x = as_int(a), y = as_int(b);
        // Python's integers do not overflow; ours are 64 bits, so past them is an error, not
        // undefined behaviour (found by fuzz_template in CI's 20-second run).
        int64_t r = 0;
        const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                              : op == "-" ? __builtin_sub_overflow(x, y, &r)
                              : op == "*" ? __builtin_mul_overflow(x, y, &r)
                                          : false;
        if (overflow) error(fmt::format("integer overflow in '{}'", op));
        if (op == "+" || op == "-" || op == "*") return r;
        if (y == 0) error("integer division or modulo by zero");
        if (y == -1 && x == std::numeric_limits<int64_t>::min()) error(fmt::format("integer overflow in '{}'", op));
        // Python floors: -7 // 2 == -4, -7 % 2 == 1.
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        if (op == "//") return q;
        int64_t qy = 0;
        if (__builtin_mul_overflow(q, y, &qy)) error("integer overflow in '%'");
        return x - qy;
      }
      const double x = as_double(a), y = as_double(b);
      if (op == "+") return x + y;
      if (op == "-") return x - y;
      if (op == "*") return x * y;
      if (y == 0) error("float division by zero");
      const double q = std::floor(x / y);
      if (op == "//") return q;
      return x - q * y;
    }
    if (op == "*" && ((a.is_string() && is_int(b)) || (is_int(a) && b.is_string()))) {
      const std::string& s = a.is_string() ? a.get_ref<const std::string&>() : b.get_ref<const std::string&>();
      const int64_t times = std::max<int64_t>(0, as_int(a.is_string() ? b : a));
      if (s.empty()) return std::string();
      if (static_cast<uint64_t>(times) > kMaxString / s.size())
        error(fmt::format("'*' would repeat a string of {} bytes {} times, over the {} MiB a template may render",
                          s.size(), times, kMaxString >> 20));
      std::string out;
      out.reserve(s.size() * static_cast<size_t>(times));
      for (int64_t i = 0; i < times; ++i) out += s;
      return out;
    }
    error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
  }

  const json& doc_;
  const Fail& fail_;
};

}  // namespace

Expression Expression::parse(const std::string& source, const Fail& refuse) {
  Expression e;
  e.source_ = source;
  Parser parser(source, [&](const std::string& what) { refuse(what + " is not supported (" + kSubset + ")"); });
  e.root_ = parser.parse();
  return e;
}

json Expression::evaluate(const json& doc, const Fail& fail_at) const { return Evaluator(doc, fail_at).eval(*root_); }

bool truthy(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (v.is_number()) return v.get<int64_t>() != 0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();  // json::empty() is false for any string
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

std::optional<json> literal_eval(const std::string& text) {
  struct Refused {};
  try {
    const Expression e = Expression::parse(text, [](const std::string&) { throw Refused{}; });
    // Only literals: evaluating against no document fails on any field reference.
    return e.evaluate(json::object(), [](const std::string&) { throw Refused{}; });
  } catch (const Refused&) {
    return std::nullopt;
  }
}

}  // namespace gpueval::jinja
