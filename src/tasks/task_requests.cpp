// What a loaded task does with one document: lm-eval's doc_to_text / doc_to_choice /
// doc_to_target, the requests of construct_requests, and the per-document metrics of
// process_results (lm_eval/api/task.py, ConfigurableTask).
#include <cmath>

#include "common/python_format.h"
#include "common/python_str.h"
#include "common/strict_json.h"
#include "gpueval/error.h"
#include "gpueval/task.h"
#include "tasks/metric_table.h"

namespace gpueval {
namespace {

bool is_digits(const std::string& s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// lm-eval reads the field itself when a doc_to_* value is a field name (`doc_to_target: label`),
// calls the function when it is one (`!function`), and renders the template otherwise. A
// single {{expression}} giving a list stays a list: rendering it and ast.literal_eval'ing the
// text, as lm-eval does, gives the same list back.
nlohmann::json resolve(const std::optional<Template>& t, DocProcessor function, const nlohmann::json& doc,
                       const std::string& where) {
  if (function) return function(doc, where);
  if (t->text().find('{') == std::string::npos && doc.is_object() && doc.contains(t->text())) return doc.at(t->text());
  if (t->is_single_expression()) {
    nlohmann::json value = t->value(doc, where);
    if (value.is_array() || value.is_object()) return value;
    if (!value.is_string()) return py::str(value);  // rendered, as lm-eval's apply_template
  }
  return t->render(doc, where);
}

// lm-eval turns a rendered "12" into the integer 12 where choices can be indexed.
// lm-eval's maybe_delimit(prefix, suffix, delimiter): either alone when the other is empty, else
// joined by the delimiter unless the prefix ends or the suffix starts with whitespace.
std::string maybe_delimit(const std::string& prefix, const std::string& suffix, const std::string& delimiter) {
  if (prefix.empty()) return suffix;
  if (suffix.empty()) return prefix;
  const std::u32string a = py::code_points(prefix), b = py::code_points(suffix);
  if (py::is_space(a.back()) || py::is_space(b.front())) return prefix + suffix;
  return prefix + delimiter + suffix;
}

bool is_index(const nlohmann::json& v) {
  return v.is_number_integer() || (v.is_string() && is_digits(v.get<std::string>()));
}

int64_t index_value(const nlohmann::json& v, const std::string& where, const char* what) {
  if (v.is_number_integer()) return v.get<int64_t>();
  try {
    return std::stoll(v.get<std::string>());
  } catch (const std::out_of_range&) {
    fail(where, "{} gives {}, which is no index into the choices", what, v.get<std::string>());
  }
}

// -logprob / UTF-8 bytes / ln 2; NaN for an empty continuation.
double bits_per_byte(double logprob, const std::string& continuation) {
  if (continuation.empty()) return std::nan("");
  return -logprob / static_cast<double>(continuation.size()) / std::log(2.0);
}

}  // namespace

nlohmann::json Task::doc_text(const Document& doc, const std::string& where) const {
  return resolve(doc_to_text_, doc_to_text_fn_, doc.fields, where);
}

int64_t Task::index_of_text(const Document& doc, const std::string& where) const {
  const nlohmann::json text = doc_text(doc, where);
  if (!is_index(text)) {
    fail(where, "doc_to_text gives {}, not a choice index as for the task's first document (a multiple-input task)",
         py::repr(text));
  }
  return index_value(text, where, "doc_to_text");
}

std::string Task::context(const Document& doc) const {
  const std::string where = location(doc);
  const std::string description = description_ ? description_->render(doc.fields, where) : "";
  const std::string system = maybe_delimit(prompt_.system_instruction, description, fewshot_delimiter_);
  if ((!doc_to_text_ && !doc_to_text_fn_) || output_type_ == OutputType::kLoglikelihoodRolling) return system;
  if (multiple_input_ && prompt_.chat)
    fail(where,
         "task '{}' gives each choice a context of its own (a multiple-input task): gpueval does not "
         "render such tasks through a chat template yet; run it without apply_chat_template",
         name_);
  std::string text;
  if (!multiple_input_) {
    const nlohmann::json value = doc_text(doc, where);
    if (has_choices() && is_index(value)) {
      fail(where,
           "doc_to_text gives the index {} but text for the task's first document (lm-eval decides from the "
           "first document whether doc_to_text gives text or, for a multiple-input task, a choice index)",
           py::str(value));
    }
    text = py::str(value);
  }
  if (!prompt_.chat) {
    std::string out = system;
    for (const size_t k : fewshot_indices(doc)) out += fewshot_rendered_[k];  // drawn at load
    return out + text;  // a multiple-input task's choices complete it (requests())
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  auto say = [&](const char* role, const std::string& content) {
    messages.push_back(nlohmann::ordered_json{{"role", role}, {"content", content}});
  };
  if (!system.empty()) say("system", system);
  if (prompt_.fewshot_as_multiturn) {
    for (const size_t k : fewshot_indices(doc)) {
      say("user", fewshot_turns_[k].question);
      say("assistant", fewshot_turns_[k].answer.value_or(""));
    }
    say("user", text);
  } else {
    // lm-eval's multiturn_to_singleturn: the examples and the question as the plain text.
    std::string user;
    for (const size_t k : fewshot_indices(doc)) user += fewshot_rendered_[k];
    say("user", user + text);
  }
  return prompt_.chat(messages);
}

Task::FewshotTurn Task::fewshot_example(const Document& doc, const std::string& where) const {
  if (!doc_to_text_ && !doc_to_text_fn_) fail(where, "task '{}' has no doc_to_text for few-shot examples", name_);
  FewshotTurn turn;
  if (multiple_input_) {
    // lm-eval's sampler shows a multiple-input example as its gold choice.
    const std::vector<std::string> options = choices(doc);
    turn.question = options.at(gold_indices(doc, options)[0]);
  } else {
    turn.question = py::str(doc_text(doc, where));
  }
  // lm-eval's build_qa_turn: a list target shows its first entry, an index the choice it
  // names; no answer ("" or none) leaves out the target delimiter too.
  const nlohmann::json t = target_at(doc, where);
  std::string text;
  if (t.is_array()) {
    if (t.empty()) fail(where, "doc_to_target gives an empty list");
    text = py::str(t[0]);
  } else if (t.is_number_integer() && has_choices() && !multiple_input_) {
    const std::vector<std::string> options = choices(doc);
    text = options.at(gold_indices(doc, options)[0]);
  } else {
    text = py::str(t);
  }
  const bool has_answer = !t.is_null() && !(t.is_string() && t.get_ref<const std::string&>().empty());
  if (has_answer) turn.answer = text;
  return turn;
}

std::vector<std::string> Task::choices(const Document& doc) const {
  if (choice_list_) return *choice_list_;
  const std::string where = location(doc);
  if (!doc_to_choice_ && !doc_to_choice_fn_) fail(where, "task '{}' has no doc_to_choice", name_);
  nlohmann::json value = resolve(doc_to_choice_, doc_to_choice_fn_, doc.fields, where);
  if (value.is_string()) {
    // lm-eval ast.literal_eval()s a rendered list.
    if (std::optional<nlohmann::json> parsed = python_literal(value.get<std::string>()); parsed && parsed->is_array()) {
      value = std::move(*parsed);
    }
  }
  if (!value.is_array()) fail(where, "doc_to_choice gives {}, not a list", quote_untrusted(py::str(value)));
  std::vector<std::string> out;
  for (const auto& item : value) {
    if (!item.is_string()) fail(where, "doc_to_choice entry {} is not a string", py::repr(item));
    out.push_back(item.get<std::string>());
  }
  return out;
}

nlohmann::json Task::target(const Document& doc) const { return target_at(doc, location(doc)); }

nlohmann::json Task::target_at(const Document& doc, const std::string& where) const {
  // A rolling task written with doc_to_text only reads its text from there.
  nlohmann::json value = (doc_to_target_ || doc_to_target_fn_)
                             ? resolve(doc_to_target_, doc_to_target_fn_, doc.fields, where)
                             : resolve(doc_to_text_, doc_to_text_fn_, doc.fields, where);
  if (!value.is_string()) return value;
  const std::string s = value.get<std::string>();
  if (is_digits(s) && has_choices()) return index_value(value, where, "doc_to_target");
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') {
    // lm-eval ast.literal_eval()s a rendered list ("['a', 'b']").
    if (std::optional<nlohmann::json> parsed = python_literal(s); parsed && parsed->is_array()) return *parsed;
  }
  return value;
}

std::vector<size_t> Task::gold_indices(const Document& doc, const std::vector<std::string>& choices) const {
  const std::string where = location(doc);
  // A multiple-input task's gold is doc_to_text's index.
  const nlohmann::json t = multiple_input_ ? nlohmann::json(index_of_text(doc, where)) : target(doc);
  auto index = [&](const nlohmann::json& v) -> size_t {
    if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if (i < 0 || i >= static_cast<int64_t>(choices.size())) {
        fail(where, "label {} is outside the {} choices", i, choices.size());
      }
      return static_cast<size_t>(i);
    }
    if (v.is_string()) {
      for (size_t i = 0; i < choices.size(); ++i) {
        if (choices[i] == v.get<std::string>()) return i;
      }
      fail(where, "target {} is not one of the choices", quote_untrusted(v.get<std::string>()));
    }
    fail(where, "doc_to_target gives {}, not a choice index or text", py::repr(v));
  };
  std::vector<size_t> gold;
  if (t.is_array()) {
    if (t.empty()) fail(where, "doc_to_target gives an empty list");
    for (const auto& v : t) {
      if (!v.is_number_integer()) fail(where, "doc_to_target list entry {} is not a choice index", py::repr(v));
      gold.push_back(index(v));
    }
  } else {
    gold.push_back(index(t));
  }
  return gold;
}

std::vector<Request> Task::requests(const Document& doc) const {
  const std::string where = location(doc);
  auto base = [&] {
    Request r;
    r.task = name_;
    r.doc_id = doc.doc_id;
    return r;
  };
  std::vector<Request> out;
  switch (output_type_) {
    case OutputType::kMultipleChoice: {
      const std::string ctx = context(doc);
      const std::vector<std::string> options = choices(doc);
      if (options.empty()) fail(where, "doc_to_choice gives no choices");
      gold_indices(doc, options);
      if (multiple_input_) {
        // One context per choice, one continuation for all (lm-eval's multiple_input_context).
        const nlohmann::json t = target(doc);
        if (!t.is_string()) fail(where, "doc_to_target gives {}, not the text the choices share", py::repr(t));
        for (size_t i = 0; i < options.size(); ++i) {
          Request r = base();
          r.choice = static_cast<int64_t>(i);
          r.type = RequestType::kLoglikelihood;
          r.context = ctx + options[i];
          r.continuation = target_delimiter_ + t.get<std::string>();
          out.push_back(std::move(r));
        }
        break;
      }
      // Under a chat template lm-eval drops the target delimiter (the context ends the turn).
      const std::string delimiter = prompt_.chat ? "" : target_delimiter_;
      for (size_t i = 0; i < options.size(); ++i) {
        Request r = base();
        r.choice = static_cast<int64_t>(i);
        r.type = RequestType::kLoglikelihood;
        r.context = ctx;
        r.continuation = delimiter + options[i];
        out.push_back(std::move(r));
      }
      break;
    }
    case OutputType::kLoglikelihood: {
      // lm-eval passes doc_to_target as the continuation as is: no target_delimiter.
      const nlohmann::json t = target(doc);
      if (!t.is_string()) fail(where, "doc_to_target gives {}, not text", py::repr(t));
      Request r = base();
      r.type = RequestType::kLoglikelihood;
      r.context = context(doc);
      r.continuation = t.get<std::string>();
      out.push_back(std::move(r));
      break;
    }
    case OutputType::kLoglikelihoodRolling: {
      const nlohmann::json t = target(doc);
      if (!t.is_string()) fail(where, "the text to score is {}, not text", py::repr(t));
      Request r = base();
      r.type = RequestType::kLoglikelihoodRolling;
      r.context = t.get<std::string>();
      out.push_back(std::move(r));
      break;
    }
    case OutputType::kGenerateUntil: {
      target(doc);
      const std::string ctx = context(doc);
      // One request per repeat (lm-eval clones the Instance `repeats` times); `choice` numbers
      // them, so each has its own seed (planner.h's request_seed).
      for (int64_t k = 0; k < repeats_; ++k) {
        Request r = base();
        r.choice = k;
        r.type = RequestType::kGenerateUntil;
        r.context = ctx;
        r.stops = until_;
        r.max_tokens = max_gen_toks_;
        r.temperature = temperature_;
        r.top_k = top_k_;
        r.top_p = top_p_;
        out.push_back(std::move(r));
      }
      break;
    }
  }
  return out;
}

std::string Task::response(const RequestResult& result) const {
  if (output_type_ != OutputType::kGenerateUntil || prompt_.think_end_token.empty()) return result.text;
  const size_t at = result.text.rfind(prompt_.think_end_token);
  const std::string after =
      at == std::string::npos ? result.text : result.text.substr(at + prompt_.think_end_token.size());
  return py::strip(after, std::nullopt, /*left=*/true, /*right=*/false);
}

std::vector<std::string> Task::filtered_output(const Document& doc, const std::vector<RequestResult>& results,
                                               size_t filter) const {
  if (filter >= filters_.size()) fail(name_, "no filter {} (the task has {})", filter, filters_.size());
  std::vector<std::string> out;
  if (output_type_ == OutputType::kGenerateUntil) {
    std::vector<std::string> responses;
    for (const RequestResult& r : results) responses.push_back(response(r));
    return filters_[filter].apply(responses, &doc.fields);
  }
  for (const RequestResult& r : results) out.push_back(r.text);
  return out;
}

std::vector<std::string> Task::programs(const Document& doc, const std::vector<RequestResult>& results,
                                        size_t filter) const {
  if (!runs_programs_) return {};
  const nlohmann::json tests = target(doc);
  if (!tests.is_string()) fail(location(doc), "the target of a task that runs programs must be its tests' text");
  std::vector<std::string> out;
  try {
    out = filtered_output(doc, results, filter);
  } catch (const Error& e) {
    fail(location(doc), "{}", e.what());
  }
  // code_eval's check_program: candidate + "\n" + test_case.
  for (std::string& program : out) program += "\n" + tests.get<std::string>();
  return out;
}

std::vector<DocMetrics> Task::process_results_all(const Document& doc, const std::vector<RequestResult>& results,
                                                  const ProgramVerdicts* verdicts) const {
  std::vector<DocMetrics> out;
  for (size_t f = 0; f < filters_.size(); ++f) out.push_back(process_results(doc, results, f, verdicts));
  return out;
}

DocMetrics Task::process_results(const Document& doc, const std::vector<RequestResult>& results, size_t filter,
                                 const ProgramVerdicts* verdicts) const {
  const std::string where = location(doc);
  if (filter >= filters_.size()) fail(where, "no filter {} (task '{}' has {})", filter, name_, filters_.size());
  DocEvidence evidence;
  switch (output_type_) {
    case OutputType::kMultipleChoice: choice_evidence(doc, results, where, evidence); break;
    case OutputType::kLoglikelihood: {
      if (results.size() != 1) fail(where, "{} results for one request of document {}", results.size(), doc.doc_id);
      evidence.logprob = results[0].logprob;
      evidence.is_greedy = results[0].is_greedy;
      evidence.bpb = bits_per_byte(results[0].logprob, target(doc).get<std::string>());
      break;
    }
    case OutputType::kLoglikelihoodRolling: {
      if (results.size() != 1) fail(where, "{} results for one request of document {}", results.size(), doc.doc_id);
      const std::string text = target(doc).get<std::string>();
      evidence.logprob = results[0].logprob;
      evidence.words = count_words(text);
      evidence.bytes = count_bytes(text);
      break;
    }
    case OutputType::kGenerateUntil: generation_evidence(doc, results, filter, verdicts, where, evidence); break;
  }
  DocMetrics out;
  for (const MetricSpec& spec : metrics_) {
    if (spec.k > static_cast<int64_t>(evidence.answers.size())) {
      fail(where, "{} needs {} responses, filter '{}' left {}", spec.name, spec.k, filters_[filter].name(),
           evidence.answers.size());
    }
    out[spec.name] = metric_row_of(spec)->compute[static_cast<size_t>(output_type_)](evidence, spec);
  }
  return out;
}

// multiple_choice: each choice's loglikelihood, per code point and per byte of the choice (without
// target_delimiter), the gold choices, and the first gold continuation's bits per byte (OLMo's bpb).
void Task::choice_evidence(const Document& doc, const std::vector<RequestResult>& results, const std::string& where,
                           DocEvidence& evidence) const {
  const std::vector<std::string> options = choices(doc);
  if (results.size() != options.size()) {
    fail(where, "{} results for the {} choices of document {}", results.size(), options.size(), doc.doc_id);
  }
  for (size_t i = 0; i < options.size(); ++i) {
    evidence.lls.push_back(results[i].logprob);
    evidence.by_chars.push_back(results[i].logprob / static_cast<double>(count_code_points(options[i])));
    evidence.by_bytes.push_back(results[i].logprob / static_cast<double>(count_bytes(options[i])));
  }
  evidence.gold = gold_indices(doc, options);
  const std::string gold_continuation =
      target_delimiter_ + (multiple_input_ ? target(doc).get<std::string>() : options[evidence.gold.front()]);
  evidence.bpb = bits_per_byte(results[evidence.gold.front()].logprob, gold_continuation);
  for (const size_t g : evidence.gold) evidence.gold_greedy = evidence.gold_greedy || results[g].is_greedy;
}

// generate_until: the responses the filter pipeline leaves, and whether a response is right: its program
// passed (a metric that runs programs), or it matches a gold answer under the metric's exact_match options.
void Task::generation_evidence(const Document& doc, const std::vector<RequestResult>& results, size_t filter,
                               const ProgramVerdicts* verdicts, const std::string& where, DocEvidence& evidence) const {
  if (static_cast<int64_t>(results.size()) != repeats_) {
    fail(where, "{} results for the {} repeats of document {}", results.size(), repeats_, doc.doc_id);
  }
  nlohmann::json gold = target(doc);
  if (has_choices() && gold.is_number_integer()) {
    const std::vector<std::string> options = choices(doc);
    const int64_t i = gold.get<int64_t>();
    if (i < 0 || i >= static_cast<int64_t>(options.size())) {
      fail(where, "label {} is outside the {} choices", i, options.size());
    }
    gold = options[static_cast<size_t>(i)];
  }
  try {
    evidence.answers = filtered_output(doc, results, filter);
  } catch (const Error& e) {
    fail(where, "{}", e.what());
  }
  if (evidence.answers.empty()) fail(where, "filter '{}' left no response to score", filters_[filter].name());
  const nlohmann::json golds = gold.is_array() ? gold : nlohmann::json::array({gold});
  evidence.right = [gold, golds, verdicts, where](const MetricSpec& spec, const std::string& answer) {
    if (spec.runs_programs) {
      // The answer's program (programs()): right when it passed.
      if (!gold.is_string()) fail(where, "the target of a task that runs programs must be its tests' text");
      const std::string program = answer + "\n" + gold.get<std::string>();
      const auto it = verdicts ? verdicts->find(program) : ProgramVerdicts::const_iterator();
      if (!verdicts || it == verdicts->end()) fail(where, "{}: a program has no verdict", spec.name);
      return it->second ? 1.0 : 0.0;
    }
    double score = 0;
    for (const auto& g : golds) score = std::max(score, exact_match(answer, py::str(g), spec.kwargs));
    return score;
  };
}
}  // namespace gpueval
