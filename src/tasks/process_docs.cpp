#include "gpueval/process_docs.h"

#include "common/python_format.h"
#include "common/python_str.h"
#include "common/utf8.h"
#include "gpueval/error.h"

namespace gpueval {
namespace {

bool is_string_list(const nlohmann::json& v) {
  if (!v.is_array()) return false;
  for (const auto& item : v) {
    if (!item.is_string()) return false;
  }
  return true;
}

const nlohmann::json& string_field(const nlohmann::json& doc, const char* key, const std::string& where,
                                   const char* layout) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_string()) fail(where, "{} document without a text field '{}'", layout, key);
  return *it;
}

nlohmann::json arc_document(const nlohmann::json& id, const std::string& question, nlohmann::json text,
                            nlohmann::json label, const nlohmann::json& answer_key) {
  nlohmann::json out = nlohmann::json::object();
  if (!id.is_null()) out["id"] = id;
  out["question"] = question;
  out["choices"] = {{"text", std::move(text)}, {"label", std::move(label)}};
  out["answerKey"] = answer_key;
  return out;
}

nlohmann::json process_arc(const nlohmann::json& doc, const std::string& where) {
  if (!doc.is_object()) fail(where, "an ARC document must be a JSON object");
  const nlohmann::json id = doc.contains("id") ? doc.at("id") : nlohmann::json();
  const auto question = doc.find("question");
  if (question != doc.end() && question->is_string()) {
    // Hugging Face ai2_arc: already the layout the templates read.
    const auto choices = doc.find("choices");
    if (choices == doc.end() || !choices->is_object() || !is_string_list(choices->value("text", nlohmann::json())) ||
        !is_string_list(choices->value("label", nlohmann::json())) ||
        choices->at("text").size() != choices->at("label").size()) {
      fail(where,
           "ARC document (Hugging Face layout) whose choices are not {{\"text\": [...], \"label\": [...]}} of "
           "equal length");
    }
    string_field(doc, "answerKey", where, "ARC");
    return doc;
  }
  if (question != doc.end() && question->is_object()) {
    // AI2's original release: the question's stem and its labelled choices in one object.
    const std::string& stem =
        string_field(*question, "stem", where, "ARC (AI2 layout) question").get_ref<const std::string&>();
    const auto choices = question->find("choices");
    if (choices == question->end() || !choices->is_array()) {
      fail(where, "ARC document (AI2 layout) whose question has no list 'choices'");
    }
    nlohmann::json text = nlohmann::json::array(), label = nlohmann::json::array();
    for (const auto& choice : *choices) {
      if (!choice.is_object())
        fail(where, "ARC document (AI2 layout) with a choice that is not {{\"text\", \"label\"}}");
      text.push_back(string_field(choice, "text", where, "ARC (AI2 layout) choice"));
      label.push_back(string_field(choice, "label", where, "ARC (AI2 layout) choice"));
    }
    return arc_document(id, stem, std::move(text), std::move(label), string_field(doc, "answerKey", where, "ARC"));
  }
  if (doc.contains("query")) {
    // MosaicML's conversion: the prompt's "Question: " already prefixed, labels dropped.
    const std::string& query = string_field(doc, "query", where, "ARC (MosaicML layout)").get_ref<const std::string&>();
    const std::string prefix = "Question: ";
    if (query.compare(0, prefix.size(), prefix) != 0) {
      fail(where, "ARC document (MosaicML layout) whose query does not start with 'Question: '");
    }
    const auto choices = doc.find("choices");
    if (choices == doc.end() || !is_string_list(*choices) || choices->empty() || choices->size() > 26) {
      fail(where, "ARC document (MosaicML layout) whose choices are not a list of 1 to 26 strings");
    }
    const auto gold = doc.find("gold");
    if (gold == doc.end() || !gold->is_number_integer() || gold->get<int64_t>() < 0 ||
        gold->get<int64_t>() >= static_cast<int64_t>(choices->size())) {
      fail(where, "ARC document (MosaicML layout) whose gold is not an index into its {} choices", choices->size());
    }
    nlohmann::json label = nlohmann::json::array();
    for (size_t i = 0; i < choices->size(); ++i) label.push_back(std::string(1, static_cast<char>('A' + i)));
    const nlohmann::json answer_key = label[gold->get<size_t>()];
    return arc_document(id, query.substr(prefix.size()), *choices, std::move(label), answer_key);
  }
  fail(where, "not an ARC document (expected the Hugging Face ai2_arc, AI2 or MosaicML layout)");
}

nlohmann::json process_hellaswag(const nlohmann::json& doc, const std::string& where) {
  if (!doc.is_object()) fail(where, "a HellaSwag document must be a JSON object");
  if (!doc.contains("ctx_a") && doc.contains("query") && doc.contains("choices") && doc.contains("label")) return doc;
  const char* layout = "HellaSwag";
  const std::string& activity = string_field(doc, "activity_label", where, layout).get_ref<const std::string&>();
  const std::string& ctx_a = string_field(doc, "ctx_a", where, layout).get_ref<const std::string&>();
  const std::string& ctx_b = string_field(doc, "ctx_b", where, layout).get_ref<const std::string&>();
  const auto endings = doc.find("endings");
  if (endings == doc.end() || !is_string_list(*endings))
    fail(where, "HellaSwag document whose endings are not a list of strings");
  const auto label = doc.find("label");
  // int(label): the Hugging Face copy writes "0".."3", the original release 0..3.
  int64_t gold = -1;
  if (label != doc.end() && label->is_number_integer()) {
    gold = label->get<int64_t>();
  } else if (label != doc.end() && label->is_string() && !label->get_ref<const std::string&>().empty() &&
             label->get_ref<const std::string&>().find_first_not_of("0123456789") == std::string::npos &&
             label->get_ref<const std::string&>().size() < 10) {
    gold = std::stoll(label->get<std::string>());
  } else {
    fail(where, "HellaSwag document whose label is {}, not an integer",
         label == doc.end() ? "missing" : py::repr(*label));
  }
  if (gold < 0 || gold >= static_cast<int64_t>(endings->size())) {
    fail(where, "HellaSwag label {} is outside the {} endings", gold, endings->size());
  }
  nlohmann::json out = doc;
  out["query"] = hellaswag_preprocess(activity + ": " + ctx_a + " " + python_capitalize(ctx_b));
  nlohmann::json choices = nlohmann::json::array();
  for (const auto& ending : *endings) choices.push_back(hellaswag_preprocess(ending.get<std::string>()));
  out["choices"] = std::move(choices);
  out["gold"] = gold;
  out["answer_letter"] = std::string(1, static_cast<char>('A' + gold));
  return out;
}

// ------------------------------------------------------------------ lm-eval's !function doc_to_*

const std::string& text_field(const nlohmann::json& doc, const char* key, const std::string& where, const char* task) {
  if (!doc.is_object()) fail(where, "a {} document must be a JSON object", task);
  const auto it = doc.find(key);
  if (it == doc.end()) fail(where, "{} document without the field '{}'", task, key);
  if (!it->is_string()) fail(where, "{} document whose '{}' is {}, not text", task, key, py::repr(*it));
  return it->get_ref<const std::string&>();
}

// COPA's label: 0 names choice1, 1 choice2 (lm-eval reads any other value as choice2; here it
// is an error).
int64_t copa_label(const nlohmann::json& doc, const std::string& where) {
  const auto it = doc.find("label");
  if (it == doc.end()) fail(where, "COPA document without the field 'label'");
  if (!it->is_number_integer() || (it->get<int64_t>() != 0 && it->get<int64_t>() != 1)) {
    fail(where, "COPA document whose label {} is not 0 or 1 (an index into choice1, choice2)", py::repr(*it));
  }
  return it->get<int64_t>();
}

// copa utils.convert_choice: the first character lower-cased.
std::string copa_choice(const nlohmann::json& doc, const char* key, const std::string& where) {
  const std::string& choice = text_field(doc, key, where, "COPA");
  if (choice.empty()) fail(where, "COPA document whose {} is empty", key);
  return " " + py::lower(py::slice(choice, 0, 1)) + py::slice(choice, 1, std::nullopt);
}

nlohmann::json copa_doc_to_text(const nlohmann::json& doc, const std::string& where) {
  const std::string& question = text_field(doc, "question", where, "COPA");
  const char* connector = question == "cause" ? "because" : question == "effect" ? "therefore" : nullptr;
  if (!connector)
    fail(where, "COPA document whose question {} is neither 'cause' nor 'effect'", py::repr(nlohmann::json(question)));
  // The premise without its final character (the period).
  return py::slice(py::strip(text_field(doc, "premise", where, "COPA")), std::nullopt, -1) + " " + connector;
}

nlohmann::json copa_doc_to_target(const nlohmann::json& doc, const std::string& where) {
  return copa_choice(doc, copa_label(doc, where) == 0 ? "choice1" : "choice2", where);
}

nlohmann::json copa_doc_to_choice(const nlohmann::json& doc, const std::string& where) {
  return nlohmann::json::array({copa_choice(doc, "choice1", where), copa_choice(doc, "choice2", where)});
}

// Winogrande's blank: the position of the first '_' of the sentence.
size_t winogrande_blank(const nlohmann::json& doc, const std::string& where) {
  const std::string& sentence = text_field(doc, "sentence", where, "Winogrande");
  const size_t blank = sentence.find('_');
  if (blank == std::string::npos) fail(where, "Winogrande sentence without '_' (the blank the options fill)");
  return blank;
}

nlohmann::json winogrande_doc_to_text(const nlohmann::json& doc, const std::string& where) {
  const std::string& answer = text_field(doc, "answer", where, "Winogrande");
  if (answer != "1" && answer != "2") {
    fail(where, "Winogrande document whose answer {} is not '1' or '2'", py::repr(nlohmann::json(answer)));
  }
  return answer == "1" ? 0 : 1;
}

nlohmann::json winogrande_doc_to_target(const nlohmann::json& doc, const std::string& where) {
  const std::string& sentence = text_field(doc, "sentence", where, "Winogrande");
  return py::strip(sentence.substr(winogrande_blank(doc, where) + 1));
}

nlohmann::json winogrande_doc_to_choice(const nlohmann::json& doc, const std::string& where) {
  const std::string& sentence = text_field(doc, "sentence", where, "Winogrande");
  const std::string before = sentence.substr(0, winogrande_blank(doc, where));
  return nlohmann::json::array({before + text_field(doc, "option1", where, "Winogrande"),
                                before + text_field(doc, "option2", where, "Winogrande")});
}

constexpr struct {
  const char* name;
  DocProcessor function;
} kDocFunctions[] = {
    {"copa.doc_to_text", copa_doc_to_text},
    {"copa.doc_to_target", copa_doc_to_target},
    {"copa.doc_to_choice", copa_doc_to_choice},
    {"winogrande.doc_to_text", winogrande_doc_to_text},
    {"winogrande.doc_to_target", winogrande_doc_to_target},
    {"winogrande.doc_to_choice", winogrande_doc_to_choice},
};

struct NamedProcessor {
  const char* name;
  DocProcessor function;
};

constexpr NamedProcessor kProcessors[] = {{"arc", process_arc}, {"hellaswag", process_hellaswag}};

}  // namespace

std::optional<DocProcessor> find_doc_processor(const std::string& name) {
  for (const NamedProcessor& p : kProcessors) {
    if (name == p.name) return p.function;
  }
  return std::nullopt;
}

std::vector<std::string> doc_processor_names() {
  std::vector<std::string> out;
  for (const NamedProcessor& p : kProcessors) out.push_back(p.name);
  return out;
}

std::optional<DocProcessor> find_doc_function(const std::string& name) {
  for (const auto& f : kDocFunctions) {
    if (name == f.name) return f.function;
  }
  return std::nullopt;
}

std::vector<std::string> doc_function_names() {
  std::vector<std::string> out;
  for (const auto& f : kDocFunctions) out.push_back(f.name);
  return out;
}

std::string python_capitalize(const std::string& s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t length = utf8_sequence_length(s, pos);
    if (length == 0) {  // not UTF-8: the byte as it is
      out += s[pos++];
      continue;
    }
    char32_t c = utf8_decode(s, pos, &length);
    if (pos == 0) {
      // Python title-cases the first character: ß becomes "Ss", µ the Greek capital mu.
      if (c == U'\u00df') {
        out += "Ss";
        pos += length;
        continue;
      }
      if ((c >= 'a' && c <= 'z') || (c >= 0xe0 && c <= 0xfe && c != 0xf7))
        c -= 0x20;
      else if (c == 0xff)
        c = 0x178;
      else if (c == 0xb5)
        c = 0x39c;
    } else {
      if ((c >= 'A' && c <= 'Z') || (c >= 0xc0 && c <= 0xde && c != 0xd7))
        c += 0x20;
      else if (c == 0x178)
        c = 0xff;
    }
    utf8_append(out, c);
    pos += length;
  }
  return out;
}

std::string hellaswag_preprocess(const std::string& text) {
  const std::string titled = py::replace(py::strip(text), " [title]", ". ");
  std::string unbracketed;
  size_t pos = 0;
  while (pos < titled.size()) {
    if (titled[pos] == '[') {
      const size_t close = titled.find_first_of("]\n", pos + 1);
      if (close != std::string::npos && titled[close] == ']') {
        pos = close + 1;
        continue;
      }
    }
    unbracketed += titled[pos++];
  }
  return py::replace(unbracketed, "  ", " ");
}

}  // namespace gpueval
