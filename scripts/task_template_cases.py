#!/usr/bin/env python3
"""Renders task-file templates through real jinja2 in lm-evaluation-harness's own environment
(lm_eval/utils.py, 0.4.x: Environment(loader=BaseLoader, undefined=StrictUndefined,
keep_trailing_newline=True), a template rendered with the document's fields as its variables)
and pins what each gives in tests/fixtures/task_template_cases.json, which
tests/jinja/template_test.cpp renders with gpueval's Template and compares byte for byte.

Cases:
  - every distinct template of the shipped task files (tasks/**/*.yaml: doc_to_text,
    doc_to_target, doc_to_choice, description), on each of the documents below, which carry the
    fields of every shipped task (MMLU, ARC, PIQA, LAMBADA, BoolQ, OpenBookQA, MBPP, GSM8K,
    TriviaQA, HumanEval, HellaSwag, the demos) with unicode, empty and edge values;
  - hand-written expressions of the subset gpueval/template.h documents (methods, slices,
    filters, tests, operators, whitespace control, conditionals), on the same documents.
An exception is recorded as "<ExceptionType>: <message>". Every dict in a document has its keys
sorted, as gpueval holds a document (nlohmann::json), so a rendered dict reads the same.

Needs jinja2 and PyYAML (the project used jinja2 3.1.6):
    python3 scripts/task_template_cases.py      # rewrites tests/fixtures/task_template_cases.json
"""
import glob
import json
import os

import jinja2
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "task_template_cases.json")
KEYS = ("doc_to_text", "doc_to_target", "doc_to_choice", "description")

ENV = jinja2.Environment(loader=jinja2.BaseLoader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def sorted_keys(v):
    if isinstance(v, dict):
        return {k: sorted_keys(v[k]) for k in sorted(v)}
    if isinstance(v, list):
        return [sorted_keys(x) for x in v]
    return v


DOCS = [
    sorted_keys(d)
    for d in [
        {
            "question": "  What is 2 + 2?\n",
            "A": "3", "B": "4", "C": "5", "D": "22", "answer": "B",
            "choices": {"text": ["red", "blue", "green", "gold"], "label": ["A", "B", "C", "D"]},
            "answerKey": "B",
            "goal": "Open a jar", "sol1": "twist the lid", "sol2": "hit it",
            "text": "the cat sat on the mat", "passage": "Cats sit.",
            "code": "def f():\n    return 1", "test_list": ["assert f() == 1", "assert f()", "assert 1"],
            "prompt": "def g(x):\n", "test": "def check(c):\n    assert c(1)\n", "entry_point": "g",
            "canonical_solution": "    return x\n", "query": "A man is", "target": "4",
            "context": "ctx", "label": 1, "gold": 0,
            "answer_text": "x\n#### 42 ", "score": -0.5, "flag": True, "nothing": None, "empty": [""],
        },
        {
            "question": "Qu'est-ce que \u00e7a? \u2014 \u4f60\u597d",
            "A": "\u00e9t\u00e9", "B": "", "C": " lead", "D": "trail ", "answer": "D",
            "choices": {"text": ["\u00e0", "b"], "label": ["1", "2"]},
            "answerKey": " 2",
            "goal": "", "sol1": "a", "sol2": "b",
            "text": "one", "passage": "",
            "code": "", "test_list": ["t0", "t1", "t2"], "is_fewshot": True,
            "prompt": "", "test": "", "entry_point": "h", "canonical_solution": "",
            "query": "", "answer_number": 7, "label": "0", "gold": 3,
            "context": "", "target": "x",
            "score": 1e-7, "flag": False, "nothing": None, "empty": {},
        },
        {
            "question": "How many?", "A": "1", "B": "2", "C": "3", "D": "4", "answer": "A",
            "choices": ["yes", "no"], "answerKey": "A",
            "goal": "x", "sol1": "y", "sol2": "z",
            "text": "  spaced   words  ", "passage": "p",
            "answer_text": "It is 6.\n#### 6",
            "code": "pass", "test_list": ["a", "b", "c"],
            "label": 0, "gold": 1, "score": 2.5, "flag": False, "nothing": None, "empty": [],
        },
    ]
]

# Expressions of the subset, each rendered on every document.
EXPRESSIONS = [
    "{{ question.strip() }}|{{ question.lstrip() }}|{{ question.rstrip() }}|{{ question.strip(' ?\\n') }}",
    "{{ text.split() }}|{{ text.split(' ') }}|{{ text.split(' ', 1) }}|{{ text.rsplit(' ', 1) }}",
    "{{ text.lower() }}{{ text.upper() }}{{ text|lower }}{{ text|upper }}{{ text|trim }}",
    "{{ text.replace('a', 'A') }}|{{ text.startswith('the') }}|{{ text.endswith('t') }}",
    "{{ text[1:4] }}|{{ text[-3:] }}|{{ text[::-1] }}|{{ text[::2] }}|{{ text[0] }}|{{ text[-1] }}",
    "{{ test_list[0] }}|{{ test_list[-1] }}|{{ test_list[1:] }}|{{ test_list[::-1] }}|{{ test_list.0 }}",
    "{{ test_list|join(', ') }}|{{ test_list|join }}|{{ text|join('-') }}|{{ test_list|length }}",
    "{{ test_list|first }}|{{ test_list|last }}|{{ text|first }}|{{ text|last }}|{{ text|length }}",
    "{{ label|int }}|{{ label|string }}|{{ (label|int) + 1 }}|{{ label|int - 1 }}|{{ '2.5'|int }}|{{ 'x'|int }}",
    "{{ gold * 2 }}|{{ gold / 2 }}|{{ gold // 2 }}|{{ gold % 2 }}|{{ -gold }}|{{ gold ** 2 }}|{{ +gold }}",
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 2 }} {{ 7 / 2 }} {{ 2 * 3 + 1 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 2 ** 10 }}",
    "{{ A ~ B ~ C }}|{{ A + B }}|{{ gold ~ label }}|{{ [A, B] + [C] }}|{{ 'ab' * 3 }}|{{ 2 * 'x' }}",
    "{{ [A, B, C, D] }}|{{ [sol1, sol2] }}|{{ [1, 'a', none, true, 1.5, False] }}|{{ [] }}",
    "{{ ['A', 'B', 'C', 'D'].index(answer) }}|{{ choices.label.index(answerKey.lstrip()) }}",
    "{{ test_list.count('a') }}|{{ test_list.index(test_list[1]) }}|{{ text.find('a') }}|{{ text.count('t') }}",
    "{{ choices }}|{{ choices.text if choices.text is defined else choices }}",
    "{{ label if label is defined else 'none' }}|{{ nope if nope is defined else 'no' }}|{{ is_fewshot is defined }}",
    "{{ label is number }}|{{ label is string }}|{{ nothing is none }}|{{ label is not none }}|{{ nope is undefined }}",
    "{{ not label }}|{{ not '' }}|{{ '' or 'x' }}|{{ 'a' and 0 }}|{{ [] or none }}|{{ label and text }}",
    "{{ 'a' if '' else 'b' if 0 else 'c' }}|{{ label ~ 'x' is defined }}",
    "{{ answer_text.split('####')[-1].strip() if answer_text is defined else target }}",
    "{% if is_fewshot is defined %}{{ code }}\n[DONE]{% else %}{{ test_list[0] }}\n{{ test_list[1] }}{% endif %}",
    "a{% if label %}X{% elif gold %}Y{% if text %}Z{% else %}z{% endif %}{% else %}-{% endif %}\n{% if flag %}1{% endif %}b",
    "a  {{- label -}}  b|x{# note #}y|x \n{#- note -#}\n y|a  {%- if label -%}  b  {%- endif %} c\n",
    "{% raw %}{{ not rendered }}{% endraw %}|{{ '}}' }}|{{ 'it\\'s' }}|{{ \"a\\nb\" }}|{{ '\\u00e9' }}",
    "{{ score }}|{{ score * 2 }}|{{ score|int }}|{{ score|string }}|{{ flag }}|{{ nothing }}|{{ empty }}",
    "{{ question.title() }}|{{ question.capitalize() }}|{{ text.center(30, '*') }}|{{ text.zfill(25) }}",
    "{{ choices.text[5] }}",
    "{{ nope }}",
    "{{ label + 1 }}",
    "{{ text.split(1) }}",
    "{{ gold // 0 }}",
    "{{ test_list.index('zz') }}",
    "{{ text.foo() }}",
    "{{ nope.x }}",
    "{{ answer.aliases }}",
    # A missing field handed to a filter, test or operator: StrictUndefined fails wherever Python
    # reads it (str, len, iter, bool, ==); only `is` tests and a short-circuited and/or hold it.
    "{{ nope|length }}", "{{ nope|int }}", "{{ nope|string }}", "{{ nope|join }}", "{{ nope|first }}",
    "{{ nope|last }}", "{{ nope|lower }}", "{{ nope|upper }}", "{{ nope|trim }}",
    "{{ nope is none }}|{{ nope is string }}|{{ nope is number }}|{{ nope is not defined }}",
    "{{ not nope }}", "{{ nope ~ 'x' }}", "{{ nope + 1 }}", "{{ -nope }}", "{{ nope[0] }}", "{{ text[nope] }}",
    "{{ nope.x is defined }}", "{{ nope if true else 1 }}|{{ 1 if true else nope }}",
    "{{ nope or 'x' }}", "{{ 'x' or nope }}", "{{ nope and 'x' }}", "{{ test_list.index(nope) }}",
    "{{ test_list|join(nope) }}",
]


def render(template, doc):
    try:
        return {"output": ENV.from_string(template).render(**doc)}
    except Exception as e:  # what lm-eval would raise while building the request
        return {"error": f"{type(e).__name__}: {e}"}


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def shipped_templates():
    found = set()
    for path in glob.glob(os.path.join(ROOT, "tasks", "**", "*.yaml"), recursive=True):
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_Loader) or {}
        for key in KEYS:
            value = data.get(key)
            if isinstance(value, str) and ("{{" in value or "{%" in value):
                found.add(value)
    return sorted(found)


def main():
    cases = []
    for source, templates in (("tasks", shipped_templates()), ("subset", EXPRESSIONS)):
        for t_index, template in enumerate(templates):
            for d_index, doc in enumerate(DOCS):
                cases.append({"name": f"{source}{t_index}_doc{d_index}", "template": template, "doc": d_index,
                              **render(template, doc)})
    out = {"jinja2_version": jinja2.__version__, "documents": DOCS, "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1, sort_keys=False)
        f.write("\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"{OUT}: {len(cases)} cases ({errors} raise)")


if __name__ == "__main__":
    main()
