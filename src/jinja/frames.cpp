#include "jinja/frames.h"

#include <map>
#include <set>

namespace gpueval::jinja {
namespace {

// How a frame's name starts (Jinja2's idtracking: VAR_LOAD_RESOLVE, _ALIAS, _UNDEFINED).
enum class Start { kContext, kOuter, kUndefined };

struct Symbols {
  const Symbols* parent = nullptr;
  std::map<std::string, Start> refs;
  std::set<std::string> stores;

  bool known(const std::string& name) const {
    for (const Symbols* s = this; s; s = s->parent)
      if (s->refs.count(name)) return true;
    return false;
  }
  void load(const std::string& name) {
    if (!known(name)) refs[name] = Start::kContext;
  }
  void store(const std::string& name) {
    stores.insert(name);
    if (!refs.count(name)) refs[name] = parent && parent->known(name) ? Start::kOuter : Start::kUndefined;
  }
  void parameter(const std::string& name) {
    stores.insert(name);
    refs[name] = Start::kOuter;
  }
  // Jinja2's branch_update: a name assigned in only some of the branches starts from outside.
  void merge_branches(const std::vector<Symbols>& branches) {
    std::map<std::string, size_t> count;
    for (const Symbols& b : branches)
      for (const std::string& n : b.stores)
        if (!stores.count(n)) ++count[n];
    for (const Symbols& b : branches) {
      for (const auto& [n, start] : b.refs) refs[n] = start;
      stores.insert(b.stores.begin(), b.stores.end());
    }
    for (const auto& [n, c] : count) {
      if (c == branches.size()) continue;
      refs[n] = parent && parent->known(n) ? Start::kOuter : Start::kContext;
    }
  }
};

class Analysis {
 public:
  explicit Analysis(FrameUndefined& out) : out_(out) {}

  void frame(const Body& body, const Symbols* parent, const std::vector<std::string>& parameters,
             const std::vector<const Expr*>& first_loads) {
    Symbols s;
    s.parent = parent;
    for (const std::string& p : parameters) s.parameter(p);
    for (const Expr* e : first_loads)
      if (e) loads(*e, s);
    std::vector<Child> children;
    walk(body, s, children);
    std::vector<std::string> undefined;
    for (const auto& [n, start] : s.refs)
      if (start == Start::kUndefined) undefined.push_back(n);
    if (!undefined.empty()) out_[&body] = std::move(undefined);
    for (const Child& c : children) frame(*c.body, &s, c.parameters, c.first_loads);
  }

 private:
  struct Child {
    const Body* body;
    std::vector<std::string> parameters;
    std::vector<const Expr*> first_loads;
  };

  void loads(const Expr& e, Symbols& s) {
    if (e.kind == Expr::Kind::kName) s.load(e.name);
    for (const ExprPtr* x : {&e.a, &e.b, &e.c})
      if (*x) loads(**x, s);
    for (const ExprPtr& x : e.args)
      if (x) loads(*x, s);
    for (const auto& kv : e.kwargs)
      if (kv.second) loads(*kv.second, s);
    for (const auto& kv : e.ops)
      if (kv.second) loads(*kv.second, s);
  }

  void walk(const Body& body, Symbols& s, std::vector<Child>& children) {
    for (const StmtPtr& st : body) {
      switch (st->kind) {
        case Stmt::Kind::kOutput: loads(*st->expr, s); break;
        case Stmt::Kind::kIf: {
          // Jinja2's three branches: the body, the elifs together, the else.
          loads(*st->branches[0].first, s);
          std::vector<Symbols> branches(3, s);
          walk(st->branches[0].second, branches[0], children);
          for (size_t i = 1; i < st->branches.size(); ++i) {
            loads(*st->branches[i].first, branches[1]);
            std::vector<Symbols> inner(3, branches[1]);
            walk(st->branches[i].second, inner[0], children);
            branches[1].merge_branches(inner);
          }
          walk(st->else_body, branches[2], children);
          s.merge_branches(branches);
          break;
        }
        case Stmt::Kind::kFor: {
          loads(*st->expr, s);
          std::vector<std::string> params = st->targets;
          params.push_back("loop");
          children.push_back({&st->body, params, {st->filter.get()}});
          if (!st->else_body.empty()) children.push_back({&st->else_body, {}, {}});
          break;
        }
        case Stmt::Kind::kSet:
          loads(*st->expr, s);
          if (!st->attr.empty())
            s.load(st->targets[0]);
          else
            for (const std::string& t : st->targets) s.store(t);
          break;
        case Stmt::Kind::kSetBlock:
          s.store(st->targets[0]);
          children.push_back({&st->body, {}, {}});
          break;
        case Stmt::Kind::kMacro:
        case Stmt::Kind::kCallBlock: {
          if (st->kind == Stmt::Kind::kMacro)
            s.store(st->name);
          else
            loads(*st->expr, s);
          std::vector<std::string> params;
          std::vector<const Expr*> defaults;
          for (const auto& [name, def] : st->params) {
            params.push_back(name);
            defaults.push_back(def.get());
          }
          params.push_back("caller");
          children.push_back({&st->body, params, defaults});
          break;
        }
        case Stmt::Kind::kFilterBlock:
          if (st->filter) loads(*st->filter, s);
          children.push_back({&st->body, {}, {}});
          break;
        default: break;
      }
    }
  }

  FrameUndefined& out_;
};

}  // namespace

FrameUndefined analyze_frames(const Body& root) {
  FrameUndefined out;
  Analysis(out).frame(root, nullptr, {}, {});
  return out;
}

}  // namespace gpueval::jinja
