#include "jinja/parser.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "common/python_str.h"
#include "common/utf8.h"
#include "gpueval/error.h"

namespace gpueval::jinja {
namespace {

struct Token {
  enum class Kind { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kInt, kFloat, kString, kOp, kEof };
  Kind kind = Kind::kEof;
  std::string text;
  Value value;
  int line = 1;
  size_t begin = 0, end = 0;  // the token's text in the template: [begin, end)
};

constexpr int kMaxDepth = 200;

// Jinja2's string literal: Python's unicode-escape decoding of what is between the quotes.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char e = s[++i];
    auto hex = [&](size_t digits) -> bool {
      uint32_t cp = 0;
      for (size_t k = 1; k <= digits; ++k) {
        if (i + k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + k]))) return false;
        const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i + k])));
        cp = cp * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
      }
      utf8_append(out, cp);
      i += digits;
      return true;
    };
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\n': break;
      case 'x':
        if (!hex(2)) out += "\\x";
        break;
      case 'u':
        if (!hex(4)) out += "\\u";
        break;
      case 'U':
        if (!hex(8)) out += "\\U";
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            cp = cp * 8 + (s[++i] - '0');
          utf8_append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

// Python's \s on one code point at `pos` (ASCII whitespace and Unicode's), with its length.
size_t space_at(const std::string& s, size_t pos) {
  if (pos >= s.size()) return 0;
  size_t length = utf8_sequence_length(s, pos);
  if (length == 0) return 0;
  const char32_t c = utf8_decode(s, pos, &length);
  return py::is_space(c) ? length : 0;
}

bool all_space(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // whitespace_re is \s+: at least one
  for (size_t p = from; p < s.size();) {
    const size_t n = space_at(s, p);
    if (n == 0) return false;
    p += n;
  }
  return true;
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& where, const SyntaxOptions& options) : where_(where), options_(options) {
    // Jinja2 reads \r\n and \r as \n, and without keep_trailing_newline drops one final newline.
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!options_.keep_trailing_newline && !src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  // The template as the tokens' offsets read it (line ends normalised).
  const std::string& source() const { return src_; }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t p = pos_;
      while (true) {
        p = src_.find('{', p);
        if (p == std::string::npos || p + 1 >= src_.size()) {
          p = std::string::npos;
          break;
        }
        const char c = src_[p + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++p;
      }
      if (p == std::string::npos) {
        emit_data(src_.substr(pos_), line_at(pos_));
        pos_ = src_.size();
        break;
      }
      const char c = src_[p + 1];
      const char sign = p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+') ? src_[p + 2] : 0;
      std::string text = src_.substr(pos_, p - pos_);
      const int text_line = line_at(pos_);
      size_t raw_end = 0;
      const bool raw = c == '%' && match_raw_begin(p, &raw_end);
      strip_before(text, sign, c != '{');
      emit_data(text, text_line);
      if (raw) {
        line_starting_ = src_[raw_end - 1] == '\n';
        pos_ = raw_end;
        lex_raw_body(line_at(p));
        continue;
      }
      pos_ = p + 2 + (sign ? 1 : 0);
      line_starting_ = false;
      if (c == '#') {
        lex_comment(line_at(p));
      } else {
        lex_tag(c == '{', line_at(p));
      }
    }
    Token eof;
    eof.kind = Token::Kind::kEof;
    eof.line = line_at(src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) { throw SyntaxError(where_, line, what); }

  int line_at(size_t pos) {
    while (counted_ < pos && counted_ < src_.size()) {
      if (src_[counted_] == '\n') ++line_;
      ++counted_;
    }
    return line_;
  }

  void emit_data(const std::string& text, int line) {
    if (text.empty()) return;
    Token t;
    t.kind = Token::Kind::kData;
    t.text = text;
    t.line = line;
    tokens_.push_back(std::move(t));
  }

  // Jinja2's OptionalLStrip: `-` strips all whitespace before the tag; otherwise, with
  // lstrip_blocks and a block or comment tag, spaces between the line's start and the tag go.
  void strip_before(std::string& text, char sign, bool lstrip_applies) {
    if (sign == '-') {
      text = py::strip(text, std::nullopt, false, true);
    } else if (sign != '+' && options_.lstrip_blocks && lstrip_applies) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(text, l_pos)) text.resize(l_pos);
    }
  }

  size_t skip_space(size_t p) const {
    while (size_t n = space_at(src_, p)) p += n;
    return p;
  }

  bool match_word(size_t p, const char* word, size_t* after) const {
    const size_t n = std::char_traits<char>::length(word);
    if (src_.compare(p, n, word) != 0) return false;
    *after = p + n;
    return true;
  }

  // `{%` [-+] \s* raw \s* (`-%}` \s* | `%}`) at p; *end after it. No trim_blocks newline here,
  // as in Jinja2.
  bool match_raw_begin(size_t p, size_t* end) const {
    size_t q = p + 2;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
    q = skip_space(q);
    if (!match_word(q, "raw", &q)) return false;
    q = skip_space(q);
    if (match_word(q, "-%}", &q)) {
      *end = skip_space(q);
      return true;
    }
    if (match_word(q, "%}", &q)) {
      *end = q;
      return true;
    }
    return false;
  }

  // After `{% raw %}`: text up to `{% endraw %}`, whose own whitespace control applies.
  void lex_raw_body(int line) {
    for (size_t p = src_.find("{%", pos_); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = skip_space(q);
      if (!match_word(q, "endraw", &q)) continue;
      q = skip_space(q);
      size_t end = 0;
      if (match_word(q, "+%}", &end)) {
      } else if (match_word(q, "-%}", &end)) {
        end = skip_space(end);
      } else if (match_word(q, "%}", &end)) {
        if (options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string text = src_.substr(pos_, p - pos_);
      const int text_line = line_at(pos_);
      strip_before(text, sign, true);
      emit_data(text, text_line);
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    fail(line, "missing end of raw directive ({% endraw %})");
  }

  void lex_comment(int line) {
    for (size_t i = pos_; i < src_.size(); ++i) {
      size_t end = 0;
      if (match_word(i, "+#}", &end)) {
      } else if (match_word(i, "-#}", &end)) {
        end = skip_space(end);
      } else if (match_word(i, "#}", &end)) {
        if (options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    fail(line, "missing end of comment tag ('#}')");
  }

  // A token at pos_ (a name's or operator's text is its extent; a tag's begin or end has none).
  void push(Token::Kind kind, std::string text, int line) {
    Token t;
    t.kind = kind;
    t.begin = pos_;
    t.end = pos_ + (kind == Token::Kind::kName || kind == Token::Kind::kOp ? text.size() : 0);
    t.text = std::move(text);
    t.line = line;
    tokens_.push_back(std::move(t));
  }

  void lex_tag(bool variable, int line) {
    push(variable ? Token::Kind::kVarBegin : Token::Kind::kBlockBegin, "", line);
    std::vector<char> balance;
    while (true) {
      const int here = line_at(pos_);
      if (pos_ >= src_.size())
        fail(here,
             variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      size_t end = 0;
      if (balance.empty()) {
        bool ended = false;
        if (variable) {
          if (match_word(pos_, "-}}", &end)) {
            end = skip_space(end);
            ended = true;
          } else if (match_word(pos_, "}}", &end)) {
            ended = true;
          }
        } else if (match_word(pos_, "+%}", &end)) {
          ended = true;
        } else if (match_word(pos_, "-%}", &end)) {
          end = skip_space(end);
          ended = true;
        } else if (match_word(pos_, "%}", &end)) {
          if (options_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
          ended = true;
        }
        if (ended) {
          push(variable ? Token::Kind::kVarEnd : Token::Kind::kBlockEnd, "", here);
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (const size_t n = space_at(src_, pos_)) {
        pos_ += n;
        continue;
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = pos_;
        while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        push(Token::Kind::kName, src_.substr(pos_, q - pos_), here);
        pos_ = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(here);
      } else if (c == '\'' || c == '"') {
        size_t q = pos_ + 1;
        while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
        if (q >= src_.size()) fail(here, "unexpected char " + py_char_repr(c) + " at " + std::to_string(pos_));
        Token t;
        t.kind = Token::Kind::kString;
        t.line = here;
        t.value = Value(unescape(src_.substr(pos_ + 1, q - pos_ - 1)));
        t.begin = pos_;
        t.end = q + 1;
        tokens_.push_back(std::move(t));
        pos_ = q + 1;
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                           "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
        const char* found = nullptr;
        for (const char* op : kOps) {
          if (src_.compare(pos_, std::char_traits<char>::length(op), op) == 0) {
            found = op;
            break;
          }
        }
        if (!found) fail(here, "unexpected char " + py_char_repr(c) + " at " + std::to_string(pos_));
        const std::string op = found;
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) fail(here, "unexpected '" + op + "'");
          if (balance.back() != op[0]) fail(here, fmt::format("unexpected '{}', expected '{}'", op, balance.back()));
          balance.pop_back();
        }
        push(Token::Kind::kOp, op, here);
        pos_ += op.size();
      }
    }
  }

  static std::string py_char_repr(char c) { return c == '\'' ? "\"'\"" : "'" + std::string(1, c) + "'"; }

  void lex_number(int line) {
    size_t q = pos_;
    auto digits = [&] {
      const size_t start = q;
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) || (src_[q] == '_' && q > start)))
        ++q;
    };
    std::string text;
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == Token::Kind::kOp && tokens_.back().text == ".";
    if (src_[q] == '0' && q + 1 < src_.size() && src_[q + 1] != '\0' && std::strchr("bBoOxX", src_[q + 1])) {
      const int base = std::tolower(src_[q + 1]) == 'b' ? 2 : std::tolower(src_[q + 1]) == 'o' ? 8 : 16;
      q += 2;
      const size_t start = q;
      while (q < src_.size() && (std::isxdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
      std::string d;
      for (size_t i = start; i < q; ++i)
        if (src_[i] != '_') d += src_[i];
      Token t;
      t.kind = Token::Kind::kInt;
      t.line = line;
      try {
        t.value = Value(static_cast<int64_t>(std::stoll(d.empty() ? "0" : d, nullptr, base)));
      } catch (const std::exception&) {
        fail(line, "the integer " + src_.substr(pos_, q - pos_) + " is past 64 bits (gpueval's Jinja subset)");
      }
      t.begin = pos_;
      t.end = q;
      tokens_.push_back(std::move(t));
      pos_ = q;
      return;
    }
    digits();
    bool is_float = false;
    if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      ++q;
      digits();
      is_float = true;
    }
    if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        q = r;
        digits();
        is_float = true;
      }
    }
    for (size_t i = pos_; i < q; ++i)
      if (src_[i] != '_') text += src_[i];
    Token t;
    t.line = line;
    if (is_float) {
      t.kind = Token::Kind::kFloat;
      t.value = Value(std::strtod(text.c_str(), nullptr));  // past the range: inf, as Python's float()
    } else {
      t.kind = Token::Kind::kInt;
      try {
        t.value = Value(static_cast<int64_t>(std::stoll(text)));
      } catch (const std::out_of_range&) {
        fail(line, "the integer " + text + " is past 64 bits (gpueval's Jinja subset)");
      }
    }
    t.begin = pos_;
    t.end = q;
    tokens_.push_back(std::move(t));
    pos_ = q;
  }

  std::string src_;
  std::string where_;
  SyntaxOptions options_;
  size_t pos_ = 0;
  size_t counted_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& where) : tokens_(std::move(tokens)), where_(where) {}

  Body parse() {
    std::string end;
    Body body = statements({}, &end);
    return body;
  }

 private:
  [[noreturn]] void fail(const std::string& what) { fail_at(peek().line, what); }
  [[noreturn]] void fail_at(int line, const std::string& what) { throw SyntaxError(where_, line, what); }

  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  Token next() {
    const Token& t = tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_];
    if (t.end > t.begin) last_end_ = t.end;
    return t;
  }
  bool at_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kOp && peek(ahead).text == op;
  }
  bool at_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kName && peek(ahead).text == name;
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Token::Kind::kEof: return "end of template";
      case Token::Kind::kVarEnd: return "end of print statement";
      case Token::Kind::kBlockEnd: return "end of statement block";
      case Token::Kind::kString: return "string";
      case Token::Kind::kInt: return "integer";
      case Token::Kind::kFloat: return "float";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!at_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(peek())));
    next();
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::kName) fail(fmt::format("expected a name, got {}", describe(peek())));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Token::Kind::kBlockEnd)
      fail(fmt::format("expected end of statement block, got {}", describe(peek())));
    next();
  }

  struct Depth {
    int& d;
    Depth(int& depth, Parser& p) : d(++depth) {
      if (d > kMaxDepth) p.fail(fmt::format("the template nests more than {} deep", kMaxDepth));
    }
    ~Depth() { --d; }
  };

  // A chain such as a.b.c... or 1+1+1... is parsed in a loop but evaluated by recursion:
  // its depth is bounded here, so a hostile template is refused rather than overflowing the stack.
  ExprPtr make(Expr e) {
    auto deeper = [&](const ExprPtr& x) {
      if (x) e.depth = std::max(e.depth, x->depth + 1);
    };
    deeper(e.a);
    deeper(e.b);
    deeper(e.c);
    for (const ExprPtr& x : e.args) deeper(x);
    for (const auto& kv : e.kwargs) deeper(kv.second);
    for (const auto& kv : e.ops) deeper(kv.second);
    if (e.depth > kMaxDepth) fail_at(e.line, fmt::format("an expression more than {} operations deep", kMaxDepth));
    // Its text: from its first operand's (or its own first token's) start to the last token read.
    if (e.a && e.a->begin < e.begin) e.begin = e.a->begin;
    if (e.begin < last_end_) e.end = last_end_;
    return std::make_shared<const Expr>(std::move(e));
  }
  Expr node(Expr::Kind kind, int line) {
    Expr e;
    e.kind = kind;
    e.line = line;
    return e;
  }

  // Statements until a block tag named in `ends` (its name consumed, stored in *end_found).
  Body statements(const std::set<std::string>& ends, std::string* end_found, int opened_line = 0,
                  const std::string& opened = "") {
    Depth depth(depth_, *this);
    Body body;
    while (true) {
      const Token& t = peek();
      switch (t.kind) {
        case Token::Kind::kData: {
          Stmt s;
          s.kind = Stmt::Kind::kText;
          s.line = t.line;
          s.text = t.text;
          body.push_back(std::make_shared<const Stmt>(std::move(s)));
          next();
          break;
        }
        case Token::Kind::kVarBegin: {
          Stmt s;
          s.kind = Stmt::Kind::kOutput;
          s.line = t.line;
          next();
          s.expr = tuple_expression(false);
          if (peek().kind != Token::Kind::kVarEnd)
            fail(fmt::format("expected end of print statement, got {}", describe(peek())));
          next();
          body.push_back(std::make_shared<const Stmt>(std::move(s)));
          break;
        }
        case Token::Kind::kBlockBegin: {
          next();
          if (peek().kind != Token::Kind::kName) fail("a statement must start with its name (e.g. '{% if ... %}')");
          const std::string name = peek().text;
          if (ends.count(name)) {
            next();
            *end_found = name;
            return body;
          }
          body.push_back(statement());
          break;
        }
        case Token::Kind::kEof:
          if (!ends.empty()) {
            std::string want;
            for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
            fail_at(opened_line,
                    fmt::format("unexpected end of template: '{}' opened here was never closed (looking for {})",
                                opened, want));
          }
          return body;
        default: fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  // {% if c %}...{% elif c %}...{% else %}...{% endif %}, after the "if" token `t`.
  void if_statement(Stmt& s, const Token& t) {
    s.kind = Stmt::Kind::kIf;
    std::string end = "elif";
    while (end == "elif") {
      ExprPtr cond = expression(true);
      expect_block_end();
      Body b = statements({"elif", "else", "endif"}, &end, t.line, "if");
      s.branches.emplace_back(cond, std::move(b));
    }
    if (end == "else") {
      expect_block_end();
      s.else_body = statements({"endif"}, &end, t.line, "if");
    }
    expect_block_end();
  }

  // {% for targets in expr [if filter] %}...[{% else %}...]{% endfor %}, after the "for" token `t`.
  void for_statement(Stmt& s, const Token& t) {
    s.kind = Stmt::Kind::kFor;
    s.targets = assign_targets();
    if (!at_name("in")) fail(fmt::format("expected 'in', got {}", describe(peek())));
    next();
    s.expr = tuple_expression(true, /*stop_at_if=*/true);
    if (at_name("if")) {
      next();
      s.filter = expression(true);
    }
    if (at_name("recursive"))
      fail("unsupported: recursive loops ('for ... recursive') are outside gpueval's Jinja subset");
    expect_block_end();
    std::string end;
    ++loops_;
    s.body = statements({"endfor", "else"}, &end, t.line, "for");
    --loops_;
    if (end == "else") {
      expect_block_end();
      s.else_body = statements({"endfor"}, &end, t.line, "for");
    }
    expect_block_end();
  }

  // {% set x = expr %}, {% set ns.attr = expr %} or the block form {% set x [| filters] %}...{% endset %}.
  void set_statement(Stmt& s, const Token& t) {
    if (peek().kind == Token::Kind::kName && at_op(".", 1)) {
      s.kind = Stmt::Kind::kSet;
      s.targets.push_back(next().text);
      next();
      s.attr = expect_name();
    } else {
      s.targets = assign_targets();
    }
    if (at_op("=")) {
      next();
      s.kind = Stmt::Kind::kSet;
      s.expr = tuple_expression(false);
      expect_block_end();
    } else {
      if (!s.attr.empty() || s.targets.size() != 1) fail("a block set ('{% set x %}...{% endset %}') assigns one name");
      s.kind = Stmt::Kind::kSetBlock;
      if (at_op("|")) s.filter = filters(nullptr);
      expect_block_end();
      std::string end;
      s.body = statements({"endset"}, &end, t.line, "set");
      expect_block_end();
    }
  }

  StmtPtr statement() {
    const Token t = next();
    const std::string& name = t.text;
    Stmt s;
    s.line = t.line;
    if (name == "if") {
      if_statement(s, t);
    } else if (name == "for") {
      for_statement(s, t);
    } else if (name == "set") {
      set_statement(s, t);
    } else if (name == "macro") {
      s.kind = Stmt::Kind::kMacro;
      s.name = expect_name();
      s.params = macro_params();
      expect_block_end();
      std::string end;
      const int loops = std::exchange(loops_, 0);
      s.body = statements({"endmacro"}, &end, t.line, "macro");
      loops_ = loops;
      expect_block_end();
    } else if (name == "call") {
      // {% call(params) m(args) %}body{% endcall %}: m is called with caller, a macro of the body.
      s.kind = Stmt::Kind::kCallBlock;
      s.name = "caller";
      if (at_op("(")) s.params = macro_params();
      s.expr = expression(true);
      if (s.expr->kind != Expr::Kind::kCall) fail_at(t.line, "expected a call after 'call'");
      expect_block_end();
      std::string end;
      const int loops = std::exchange(loops_, 0);
      s.body = statements({"endcall"}, &end, t.line, "call");
      loops_ = loops;
      expect_block_end();
    } else if (name == "filter") {
      s.kind = Stmt::Kind::kFilterBlock;
      s.filter = filters(nullptr, /*first_bar=*/false);
      expect_block_end();
      std::string end;
      s.body = statements({"endfilter"}, &end, t.line, "filter");
      expect_block_end();
    } else if (name == "generation") {
      // transformers' AssistantTracker: the body renders as is (the assistant mask is not ours).
      s.kind = Stmt::Kind::kFilterBlock;
      expect_block_end();
      std::string end;
      const int loops = std::exchange(loops_, 0);
      s.body = statements({"endgeneration"}, &end, t.line, "generation");
      loops_ = loops;
      expect_block_end();
    } else if (name == "break" || name == "continue") {
      // As in Jinja2 (where it is Python's SyntaxError when compiling): only inside a for body,
      // not across a macro, call or generation block.
      if (loops_ == 0) fail_at(t.line, fmt::format("'{}' outside a loop", name));
      s.kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end();
    } else {
      static const std::set<std::string> kUnsupported = {"include",    "import", "from",  "extends",   "block", "with",
                                                         "autoescape", "do",     "trans", "pluralize", "print"};
      static const std::set<std::string> kEnds = {"endif", "endfor", "endset", "endmacro", "endfilter", "endgeneration",
                                                  "elif",  "else",   "endraw", "endcall",  "endblock",  "endwith"};
      if (kUnsupported.count(name)) fail_at(t.line, fmt::format("unsupported statement '{}'", name));
      if (kEnds.count(name)) fail_at(t.line, fmt::format("unexpected '{}' (no open statement it closes)", name));
      fail_at(t.line, fmt::format("unknown statement '{}'", name));
    }
    return std::make_shared<const Stmt>(std::move(s));
  }

  // `(a, b=default, ...)` of a macro or a call block's caller.
  std::vector<std::pair<std::string, ExprPtr>> macro_params() {
    std::vector<std::pair<std::string, ExprPtr>> params;
    expect_op("(");
    while (!at_op(")")) {
      if (!params.empty()) expect_op(",");
      if (at_op(")")) break;
      std::string param = expect_name();
      ExprPtr def;
      if (at_op("=")) {
        next();
        def = expression(true);
      }
      params.emplace_back(std::move(param), def);
    }
    next();
    return params;
  }

  // `x`, `a, b`, `(a, b)`: the names a for or set binds.
  std::vector<std::string> assign_targets() {
    std::vector<std::string> names;
    const bool paren = at_op("(");
    if (paren) next();
    while (true) {
      names.push_back(expect_name());
      if (!at_op(",")) break;
      next();
      if (peek().kind != Token::Kind::kName) break;
    }
    if (paren) expect_op(")");
    return names;
  }

  // Jinja2's parse_tuple: expressions separated by commas are a tuple.
  ExprPtr tuple_expression(bool no_condexpr, bool stop_at_if = false, bool explicit_parens = false) {
    const int line = peek().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      const Token& t = peek();
      if (t.kind == Token::Kind::kVarEnd || t.kind == Token::Kind::kBlockEnd || at_op(")") ||
          (stop_at_if && (at_name("if") || at_name("recursive")))) {
        break;
      }
      items.push_back(no_condexpr ? or_expr() : expression(true));
      if (at_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (items.size() == 1) return items[0];
      if (!explicit_parens) fail(fmt::format("expected an expression, got {}", describe(peek())));
    }
    Expr e = node(Expr::Kind::kTuple, line);
    e.args = std::move(items);
    return make(std::move(e));
  }

  ExprPtr expression(bool with_condexpr) {
    Depth depth(depth_, *this);
    ExprPtr value = or_expr();
    while (with_condexpr && at_name("if")) {
      const int line = next().line;
      Expr e = node(Expr::Kind::kCond, line);
      e.a = value;
      e.b = or_expr();
      if (at_name("else")) {
        next();
        e.c = expression(true);
      }
      value = make(std::move(e));
    }
    return value;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    Expr e = node(Expr::Kind::kBinary, line);
    e.name = op;
    e.a = std::move(a);
    e.b = std::move(b);
    return make(std::move(e));
  }

  ExprPtr or_expr() {
    ExprPtr l = and_expr();
    while (at_name("or")) {
      const int line = next().line;
      l = binary("or", l, and_expr(), line);
    }
    return l;
  }
  ExprPtr and_expr() {
    ExprPtr l = not_expr();
    while (at_name("and")) {
      const int line = next().line;
      l = binary("and", l, not_expr(), line);
    }
    return l;
  }
  ExprPtr not_expr() {
    if (at_name("not")) {
      Depth depth(depth_, *this);
      Expr e = node(Expr::Kind::kNot, next().line);
      e.a = not_expr();
      return make(std::move(e));
    }
    return compare();
  }
  ExprPtr compare() {
    const int line = peek().line;
    ExprPtr first = math1();
    std::vector<std::pair<std::string, ExprPtr>> ops;
    while (true) {
      static const char* const kCmp[] = {"==", "!=", "<", ">", "<=", ">="};
      bool found = false;
      for (const char* op : kCmp) {
        if (at_op(op)) {
          next();
          ops.emplace_back(op, math1());
          found = true;
          break;
        }
      }
      if (found) continue;
      if (at_name("in")) {
        next();
        ops.emplace_back("in", math1());
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        ops.emplace_back("notin", math1());
      } else {
        break;
      }
    }
    if (ops.empty()) return first;
    Expr e = node(Expr::Kind::kCompare, line);
    e.a = first;
    e.ops = std::move(ops);
    return make(std::move(e));
  }
  ExprPtr math1() {
    ExprPtr l = concat();
    while (at_op("+") || at_op("-")) {
      const Token t = next();
      l = binary(t.text, l, concat(), t.line);
    }
    return l;
  }
  ExprPtr concat() {
    ExprPtr l = math2();
    while (at_op("~")) {
      const int line = next().line;
      l = binary("~", l, math2(), line);
    }
    return l;
  }
  ExprPtr math2() {
    ExprPtr l = power();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token t = next();
      l = binary(t.text, l, power(), t.line);
    }
    return l;
  }
  ExprPtr power() {
    ExprPtr l = unary(true);
    while (at_op("**")) {
      const int line = next().line;
      l = binary("**", l, unary(true), line);
    }
    return l;
  }
  ExprPtr unary(bool with_filter) {
    Depth depth(depth_, *this);
    ExprPtr n;
    if (at_op("-") || at_op("+")) {
      const Token t = next();
      Expr e = node(t.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, t.line);
      e.a = unary(false);
      n = make(std::move(e));
    } else {
      n = primary();
    }
    n = postfix(n);
    if (with_filter) n = filter_expr(n);
    return n;
  }

  ExprPtr primary() {
    const Token& t = peek();
    const int line = t.line;
    const size_t begin = t.begin;
    // Every node made here starts at its first token.
    auto node = [&](Expr::Kind kind, int at) {
      Expr e = this->node(kind, at);
      e.begin = begin;
      return e;
    };
    if (t.kind == Token::Kind::kName) {
      const std::string name = next().text;
      Expr e = node(Expr::Kind::kConst, line);
      if (name == "true" || name == "True")
        e.value = Value(true);
      else if (name == "false" || name == "False")
        e.value = Value(false);
      else if (name == "none" || name == "None")
        e.value = Value();
      else {
        e.kind = Expr::Kind::kName;
        e.name = name;
      }
      return make(std::move(e));
    }
    if (t.kind == Token::Kind::kString) {
      std::string s;
      while (peek().kind == Token::Kind::kString) s += next().value.as_string();  // adjacent literals join
      Expr e = node(Expr::Kind::kConst, line);
      e.value = Value(std::move(s));
      return make(std::move(e));
    }
    if (t.kind == Token::Kind::kInt || t.kind == Token::Kind::kFloat) {
      Expr e = node(Expr::Kind::kConst, line);
      e.value = next().value;
      return make(std::move(e));
    }
    if (at_op("(")) {
      next();
      ExprPtr inner = tuple_expression(false, false, true);
      expect_op(")");
      return inner;
    }
    if (at_op("[")) {
      next();
      Expr e = node(Expr::Kind::kList, line);
      while (!at_op("]")) {
        if (!e.args.empty()) expect_op(",");
        if (at_op("]")) break;
        e.args.push_back(expression(true));
      }
      next();
      return make(std::move(e));
    }
    if (at_op("{")) {
      next();
      Expr e = node(Expr::Kind::kDict, line);
      while (!at_op("}")) {
        if (!e.args.empty()) expect_op(",");
        if (at_op("}")) break;
        e.args.push_back(expression(true));
        expect_op(":");
        e.args.push_back(expression(true));
      }
      next();
      return make(std::move(e));
    }
    fail(fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr postfix(ExprPtr n) {
    while (true) {
      if (at_op(".") || at_op("[")) {
        n = subscript(n);
      } else if (at_op("(")) {
        n = call(n);
      } else {
        return n;
      }
    }
  }

  ExprPtr filter_expr(ExprPtr n) {
    while (true) {
      if (at_op("|")) {
        n = filters(n);
      } else if (at_name("is")) {
        n = test(n);
      } else if (at_op("(")) {
        n = call(n);
      } else {
        return n;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj) {
    const Token t = next();
    if (t.text == ".") {
      const Token& attr = peek();
      if (attr.kind == Token::Kind::kName) {
        Expr e = node(Expr::Kind::kGetattr, t.line);
        e.a = obj;
        e.name = next().text;
        return make(std::move(e));
      }
      if (attr.kind == Token::Kind::kInt) {
        Expr e = node(Expr::Kind::kGetitem, t.line);
        e.a = obj;
        Expr key = node(Expr::Kind::kConst, t.line);
        key.value = next().value;
        e.b = make(std::move(key));
        return make(std::move(e));
      }
      fail(fmt::format("expected name or number after '.', got {}", describe(attr)));
    }
    std::vector<ExprPtr> keys;
    while (!at_op("]")) {
      if (!keys.empty()) expect_op(",");
      keys.push_back(subscribed());
    }
    next();
    if (keys.empty()) fail("expected a subscript, got ']'");
    ExprPtr key;
    if (keys.size() == 1) {
      key = keys[0];
    } else {
      for (const ExprPtr& k : keys)
        if (k->kind == Expr::Kind::kSlice) fail("unsupported: a slice inside a tuple subscript ('a[1, :2]')");
      Expr tuple = node(Expr::Kind::kTuple, t.line);
      tuple.args = keys;
      key = make(std::move(tuple));
    }
    if (key->kind == Expr::Kind::kSlice) {
      Expr e = *key;
      e.a = obj;
      return make(std::move(e));
    }
    Expr e = node(Expr::Kind::kGetitem, t.line);
    e.a = obj;
    e.b = key;
    return make(std::move(e));
  }

  // One subscript: an expression, or a slice `a:b:c` with any part absent.
  ExprPtr subscribed() {
    const int line = peek().line;
    ExprPtr start;
    if (!at_op(":")) {
      start = expression(true);
      if (!at_op(":")) return start;
    }
    next();
    Expr e = node(Expr::Kind::kSlice, line);
    ExprPtr stop, step;
    if (!at_op("]") && !at_op(",") && !at_op(":")) stop = expression(true);
    if (at_op(":")) {
      next();
      if (!at_op("]") && !at_op(",")) step = expression(true);
    }
    e.args = {start, stop, step};
    return make(std::move(e));
  }

  void call_args(std::vector<ExprPtr>& args, std::vector<std::pair<std::string, ExprPtr>>& kwargs) {
    expect_op("(");
    bool first = true;
    while (!at_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (at_op(")")) break;
      if (at_op("*") || at_op("**"))
        fail("unsupported: '*args' and '**kwargs' in calls are outside gpueval's Jinja subset");
      if (peek().kind == Token::Kind::kName && at_op("=", 1)) {
        std::string key = next().text;
        next();
        kwargs.emplace_back(std::move(key), expression(true));
      } else {
        if (!kwargs.empty())
          fail("invalid syntax for function call expression (a positional argument after a keyword one)");
        args.push_back(expression(true));
      }
    }
    next();
  }

  ExprPtr call(ExprPtr callee) {
    Expr e = node(Expr::Kind::kCall, peek().line);
    e.a = callee;
    call_args(e.args, e.kwargs);
    return make(std::move(e));
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (at_op(".") && peek(1).kind == Token::Kind::kName) {
      next();
      name += "." + next().text;
    }
    return name;
  }

  // `|f|g(args)`: each filter applies to the one before; `operand` null inside {% filter %}.
  ExprPtr filters(ExprPtr operand, bool first_bar = true) {
    bool bar = first_bar;
    do {
      if (bar) expect_op("|");
      bar = true;
      Expr e = node(Expr::Kind::kFilter, peek().line);
      e.a = operand;
      e.name = dotted_name();
      if (at_op("(")) call_args(e.args, e.kwargs);
      operand = make(std::move(e));
    } while (at_op("|"));
    return operand;
  }

  ExprPtr test(ExprPtr operand) {
    Expr e = node(Expr::Kind::kTest, next().line);
    e.a = operand;
    if (at_name("not")) {
      next();
      e.negated = true;
    }
    e.name = dotted_name();
    const Token& t = peek();
    if (at_op("(")) {
      call_args(e.args, e.kwargs);
    } else if ((t.kind == Token::Kind::kName || t.kind == Token::Kind::kString || t.kind == Token::Kind::kInt ||
                t.kind == Token::Kind::kFloat || at_op("[") || at_op("{")) &&
               !at_name("else") && !at_name("or") && !at_name("and")) {
      if (at_name("is")) fail("you cannot chain multiple tests with is");
      e.args.push_back(postfix(primary()));
    }
    return make(std::move(e));
  }

  std::vector<Token> tokens_;
  std::string where_;
  size_t pos_ = 0;
  size_t last_end_ = 0;  // where the last token read ends in the template
  int depth_ = 0;
  int loops_ = 0;  // for bodies around the statement being parsed (break/continue need one)
};

}  // namespace

Body parse_template(const std::string& text, const std::string& where, const SyntaxOptions& options,
                    std::string* source) {
  Lexer lexer(text, where, options);
  std::vector<Token> tokens = lexer.run();
  Parser parser(std::move(tokens), where);
  Body body = parser.parse();
  if (source) *source = lexer.source();
  return body;
}

}  // namespace gpueval::jinja
