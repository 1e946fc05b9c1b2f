// Loading a task: finding its YAML file, its JSONL or CSV documents and its few-shot examples. Reading the YAML
// file is in task_parse.cpp; what a loaded task does with a document (requests, metrics) is in task_requests.cpp.
#include "gpueval/task.h"

#include <algorithm>
#include <filesystem>

#include <fmt/ranges.h>  // fmt::join ({fmt} 11+ keeps it here)

#include "common/file_io.h"
#include "common/strict_json.h"
#include "common/strings.h"
#include "common/utf8.h"
#include "gpueval/error.h"
#include "tasks/csv.h"
#include "tasks/dataset_bounds.h"
#include "tasks/hellaswag_text.h"
#include "tasks/python_random.h"

namespace gpueval {

const char* output_type_name(OutputType type) {
  switch (type) {
    case OutputType::kMultipleChoice: return "multiple_choice";
    case OutputType::kLoglikelihood: return "loglikelihood";
    case OutputType::kLoglikelihoodRolling: return "loglikelihood_rolling";
    case OutputType::kGenerateUntil: return "generate_until";
  }
  return "?";
}

Task Task::load(const std::string& name_or_path, const std::vector<std::string>& search_dirs,
                const TaskLoadOptions& options) {
  if (looks_like_task_path(name_or_path)) {
    if (!io::path_exists(name_or_path)) fail(name_or_path, "task file not found");
    Task task = parse(name_or_path, options);
    task.load_documents();
    return task;
  }
  if (const auto path = find_task_file(name_or_path, search_dirs)) {
    Task task = parse(*path, options);
    if (task.name_ != name_or_path) fail(*path, "defines task '{}', not '{}'", task.name_, name_or_path);
    task.load_documents();
    return task;
  }
  fail("task '" + name_or_path + "'", "no {}.yaml in {}", name_or_path,
       search_dirs.empty() ? std::string("(no task directories)") : fmt::format("{}", fmt::join(search_dirs, ", ")));
}

std::vector<Document> Task::read_documents(const std::string& file, DatasetKind kind,
                                           std::vector<int64_t>& lines) const {
  std::vector<Document> documents;
  auto add = [&](nlohmann::json fields, int64_t line) {
    if (process_docs_) fields = process_docs_(fields, file + ":" + std::to_string(line));
    documents.push_back(Document{static_cast<int64_t>(documents.size()), std::move(fields)});
    lines.push_back(line);
  };
  if (kind == DatasetKind::kCsv) {
    for (const CsvRecord& record : read_csv(file, column_names_.size())) {
      nlohmann::json fields = nlohmann::json::object();
      for (size_t i = 0; i < column_names_.size(); ++i) fields[column_names_[i]] = record.fields[i];
      add(std::move(fields), record.line);
    }
    if (documents.empty()) fail(file, "no documents");
    return documents;
  }
  if (kind == DatasetKind::kText) {
    std::string text = io::read_file(file);
    const size_t bad = utf8_invalid_offset(text);
    if (bad != text.size()) {
      const int64_t line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
      fail(file + ":" + std::to_string(line), "not UTF-8 text (invalid byte at offset {})", bad);
    }
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) fail(file, "no documents (the file is empty)");
    add(nlohmann::json{{"text", std::move(text)}}, 1);
    return documents;
  }
  if (kind == DatasetKind::kHellaswagText) {
    // The fields lm-eval's hellaswag process_docs gives (its text already preprocessed), with
    // label a string as in the Hugging Face copy.
    for (HellaswagRecord& record : read_hellaswag_text(file)) {
      nlohmann::json fields = {{"query", std::move(record.context)},
                               {"choices", std::move(record.endings)},
                               {"gold", record.gold},
                               {"label", std::to_string(record.gold)}};
      add(std::move(fields), record.line);
    }
    if (documents.empty()) fail(file, "no documents");
    return documents;
  }
  // JSON Lines, or gzip-compressed JSON Lines (*.jsonl.gz, as HumanEval ships).
  const std::string text = ends_with(file, ".gz") ? io::read_gzip_file(file) : io::read_file(file);
  int64_t line_number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::string where = file + ":" + std::to_string(line_number);
    check_document_size(line.size(), where, "the line");
    const nlohmann::ordered_json parsed = parse_strict_json(line, where, "the line");
    if (!parsed.is_object()) fail(where, "expected a JSON object, got {}", parsed.type_name());
    add(nlohmann::json(parsed), line_number);
  }
  if (documents.empty()) fail(file, "no documents");
  return documents;
}

void Task::load_documents() {
  documents_ = read_documents(dataset_file_, dataset_kind_, lines_);
  if (document_range_) {
    const DocumentRange& range = *document_range_;
    std::vector<Document> kept;
    std::vector<int64_t> kept_lines;
    for (size_t i = 0; i < documents_.size(); ++i) {
      const auto it = documents_[i].fields.find(range.field);
      if (it == documents_[i].fields.end() || !it->is_number_integer()) {
        fail(dataset_file_ + ":" + std::to_string(lines_[i]),
             "document without an integer field '{}' (document_range, {})", range.field, range.where);
      }
      const int64_t id = it->get<int64_t>();
      if (id < range.first || id > range.last) continue;
      kept.push_back(Document{static_cast<int64_t>(kept.size()), std::move(documents_[i].fields)});
      kept_lines.push_back(lines_[i]);
    }
    if (kept.empty()) {
      fail(dataset_file_, "no document has {} from {} to {} (document_range, {})", range.field, range.first, range.last,
           range.where);
    }
    documents_ = std::move(kept);
    lines_ = std::move(kept_lines);
  }
  // lm-eval tests the first document: a doc_to_text giving an integer makes the task multiple input.
  if (output_type_ == OutputType::kMultipleChoice && has_choices()) {
    const nlohmann::json text = doc_text(documents_.front(), location(documents_.front()));
    multiple_input_ = text.is_number_integer() ||
                      (text.is_string() && !text.get_ref<const std::string&>().empty() &&
                       text.get_ref<const std::string&>().find_first_not_of("0123456789") == std::string::npos);
  }
  if (num_fewshot_ > 0) {
    if (!fewshot_from_dataset_ && !fewshot_inline_) {
      fewshot_pool_ = read_documents(fewshot_file_, fewshot_kind_, fewshot_lines_);
    }
    draw_fewshot();
  }
  // Render everything once, so a bad document fails the load, not the run.
  for (const Document& doc : documents_) requests(doc);
}

void Task::draw_fewshot() {
  const std::vector<Document>& pool = fewshot_pool();
  const size_t n = static_cast<size_t>(num_fewshot_);
  const bool first_n = fewshot_sampler_ == "first_n";
  // lm-eval passes the asked document to the sampler when fewshot_split is the test split
  // (here: fewshot_path is dataset_path); the default sampler then draws n + 1.
  const size_t needed = fewshot_from_dataset_ ? n + 1 : n;
  if (pool.size() < needed) {
    if (fewshot_from_dataset_) {
      fail(dataset_file_, "num_fewshot {} from the task's own {} documents needs at least {}", num_fewshot_,
           pool.size(), needed);
    }
    fail(fewshot_file_, "num_fewshot {} but only {} documents to draw examples from", num_fewshot_, pool.size());
  }
  // One generator for the task, advanced document by document in file order, as lm-eval's
  // build_all_requests calls sampler.sample() once per document (Random(fewshot_random_seed)).
  PythonRandom rnd(fewshot_seed_);
  fewshot_draws_.assign(documents_.size(), {});
  for (size_t d = 0; d < documents_.size(); ++d) {
    const Document& doc = documents_[d];
    std::vector<size_t>& out = fewshot_draws_[d];
    // lm-eval compares documents with != (dict equality), so every copy of the asked one goes.
    auto is_asked = [&](size_t k) { return fewshot_from_dataset_ && pool[k].fields == doc.fields; };
    auto too_few = [&](size_t have) {
      fail(location(doc), "only {} of the {} few-shot documents differ from this one; num_fewshot is {}", have,
           pool.size(), num_fewshot_);
    };
    if (first_n) {
      // FirstNSampler: the pool without the asked document, the first n.
      for (size_t k = 0; k < pool.size() && out.size() < n; ++k) {
        if (!is_asked(k)) out.push_back(k);
      }
      if (out.size() < n) too_few(out.size());
      continue;
    }
    // ContextSampler.sample: rnd.sample(pool, n), or with the asked document
    // rnd.sample(pool, n + 1) less its copies, the first n. lm-eval tests `not eval_doc`, so an
    // empty document counts as none.
    const bool skip = fewshot_from_dataset_ && !doc.fields.empty();
    if (!skip) {
      out = rnd.sample_indices(pool.size(), n);
      continue;
    }
    for (const size_t k : rnd.sample_indices(pool.size(), n + 1)) {
      if (!is_asked(k) && out.size() < n) out.push_back(k);
    }
    if (out.size() < n) {
      // Copies of the asked document took the headroom: lm-eval draws n again from the pool
      // without them.
      std::vector<size_t> others;
      for (size_t k = 0; k < pool.size(); ++k) {
        if (!is_asked(k)) others.push_back(k);
      }
      if (others.size() < n) too_few(others.size());
      out.clear();
      for (const size_t i : rnd.sample_indices(others.size(), n)) out.push_back(others[i]);
    }
  }
  // Render each example used once; context() joins them.
  fewshot_rendered_.assign(pool.size(), std::string());
  fewshot_turns_.assign(pool.size(), FewshotTurn{});
  std::vector<bool> used(pool.size(), false);
  for (const std::vector<size_t>& draws : fewshot_draws_) {
    for (const size_t k : draws) used[k] = true;
  }
  for (size_t k = 0; k < pool.size(); ++k) {
    if (!used[k]) continue;
    const std::string where =
        fewshot_from_dataset_ ? location(pool[k]) : fewshot_file_ + ":" + std::to_string(fewshot_lines_[k]);
    fewshot_turns_[k] = fewshot_example(pool[k], where);
    const FewshotTurn& t = fewshot_turns_[k];
    fewshot_rendered_[k] = t.question + (t.answer ? target_delimiter_ + *t.answer : "") + fewshot_delimiter_;
  }
}

const std::vector<size_t>& Task::fewshot_indices(const Document& doc) const {
  static const std::vector<size_t> kNone;
  if (num_fewshot_ == 0) return kNone;
  if (doc.doc_id < 0 || doc.doc_id >= static_cast<int64_t>(fewshot_draws_.size())) {
    fail(location(doc), "document {} is not a document of task '{}'", doc.doc_id, name_);
  }
  return fewshot_draws_[static_cast<size_t>(doc.doc_id)];
}

std::string Task::location(const Document& doc) const {
  if (doc.doc_id < 0 || doc.doc_id >= static_cast<int64_t>(lines_.size())) {
    return dataset_file_ + ": document " + std::to_string(doc.doc_id);
  }
  return dataset_file_ + ":" + std::to_string(lines_[static_cast<size_t>(doc.doc_id)]);
}

bool looks_like_task_path(const std::string& name) {
  return name.find('/') != std::string::npos || ends_with(name, ".yaml") || ends_with(name, ".yml");
}

std::optional<std::string> find_task_file(const std::string& name, const std::vector<std::string>& search_dirs) {
  namespace fs = std::filesystem;
  for (const std::string& dir : search_dirs) {
    const std::string path = dir + "/" + name + ".yaml";
    if (io::path_exists(path)) return path;
    std::error_code ec;
    std::vector<std::string> subdirs;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_directory(ec)) subdirs.push_back(it->path().string());
    }
    std::sort(subdirs.begin(), subdirs.end());
    for (const std::string& sub : subdirs) {
      if (io::path_exists(sub + "/" + name + ".yaml")) return sub + "/" + name + ".yaml";
    }
  }
  return std::nullopt;
}

std::vector<Request> build_requests(const std::vector<const Task*>& tasks, std::optional<int64_t> limit) {
  std::vector<Request> out;
  for (const Task* task : tasks) {
    const auto& docs = task->documents();
    const size_t n = limit ? std::min(docs.size(), static_cast<size_t>(std::max<int64_t>(*limit, 0))) : docs.size();
    for (size_t i = 0; i < n; ++i) {
      for (Request& r : task->requests(docs[i])) {
        r.index = static_cast<int64_t>(out.size());
        out.push_back(std::move(r));
      }
    }
  }
  return out;
}

}  // namespace gpueval
