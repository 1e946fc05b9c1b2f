#!/usr/bin/env python3
"""Renders small templates, and a few real-world chat templates, through real jinja2 with
transformers' exact chat-template environment, and pins what they give in
tests/fixtures/jinja_cases.json for tests/jinja/jinja_engine_test.cpp, which renders each case with
gpueval's Jinja engine and compares byte for byte.

Every case goes through transformers.utils.chat_template_utils.render_jinja_template (the
function apply_chat_template calls): the template compiled by _compile_jinja_template
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, AssistantTracker,
tojson/raise_exception/strftime_now/namespace/dict), with the case's context split as
render_jinja_template takes it (messages, tools, documents, add_generation_prompt, the rest as
keyword arguments). strftime_now's clock is frozen at 2025-06-15T12:00:00. An exception is
recorded as "<ExceptionType>: <message>".

Run with a Python that has transformers and jinja2 (the project uses
a Python with transformers 5.25.0 and jinja2 3.1.6):
    python scripts/jinja_reference_cases.py            # rewrites tests/fixtures/jinja_cases.json
"""
import datetime as _dt
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "jinja_cases.json")
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "chat_templates")


class _FrozenDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2025, 6, 15, 12, 0, 0)


chat_template_utils.datetime = _FrozenDatetime

# (name, template, context)
CASES = []


def case(name, template, **context):
    CASES.append((name, template, context))


# ---------------------------------------------------------------- whitespace: trim/lstrip, - and +
case("ws_trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter")
case("ws_lstrip_blocks", "  {% if true %}\n  yes\n  {% endif %}\nend")
case("ws_lstrip_not_for_output", "  {{ 'x' }}\n  {% if true %}y{% endif %}")
case("ws_minus_left", "a  \n  {%- if true %}b{% endif %}")
case("ws_minus_right", "{% if true -%}  \n  b{% endif %}")
case("ws_minus_both_output", "a \n {{- 'b' -}} \n c")
case("ws_plus_disables_lstrip", "  {%+ if true %}x{% endif %}")
case("ws_plus_disables_trim", "{% if true +%}\nx{% endif %}")
case("ws_comment_trim", "a\n{# comment #}\nb\n  {# indented #}\nc")
case("ws_comment_minus", "a   {#- c -#}   b")
case("ws_trailing_newline_dropped", "line\n")
case("ws_two_trailing_newlines", "line\n\n")
case("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc")
case("ws_lstrip_tab_and_mixed", "x\n\t \t{% if true %}y{% endif %}\n \tz {% if true %}w{% endif %}")
case("ws_lstrip_after_text_on_line", "x {% if true %}y{% endif %}")
case("ws_start_of_template", "   {% if true %}y{% endif %}")
case("ws_nested_loops", "{% for i in range(2) %}\n  {% for j in range(2) %}\n    {{ i }}{{ j }}\n  {% endfor %}\n{% endfor %}\n")
case("ws_raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}\nafter")
case("ws_raw_minus", "a {%- raw -%} x {{ y }} {%- endraw -%} b")
case("ws_raw_trim_endraw", "{% raw %}\nraw\n{% endraw %}\nnext")
case("ws_variable_no_trim", "{{ 'a' }}\nb")
case("ws_set_trim", "{% set x = 1 %}\n{{ x }}")
case("ws_minus_strips_newlines", "a\n\n\n{%- set x = 1 -%}\n\n\nb")
case("ws_lstrip_endfor_lines", "<ul>\n{% for x in [1, 2] %}\n    <li>{{ x }}</li>\n{% endfor %}\n</ul>")

# ---------------------------------------------------------------- output of Python values
case("out_none_bool", "{{ none }} {{ true }} {{ false }} {{ None }} {{ True }}")
case("out_numbers", "{{ 1 }} {{ -3 }} {{ 1.5 }} {{ 1.0 }} {{ 10/4 }} {{ 10/5 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 2**-1 }}")
case("out_float_repr", "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 123456789.123 }} {{ 1/3 }} {{ -0.0 }} {{ 3.0 * 2 }}")
case("out_list_dict", "{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1, {'x': none}]} }}")
case("out_tuple", "{{ (1,) }} {{ (1, 'b') }} {{ () }}")
case("out_nested_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' and \"', 'back\\\\slash', 'nl\\n'] }}")
case("out_context_values", "{{ d }} {{ l }} {{ s }} {{ f }} {{ i }} {{ b }} {{ n }}",
     d={"b": 1, "a": [True, None]}, l=[1, 2.5, "x"], s="str", f=2.0, i=7, b=False, n=None)
case("out_unicode_repr", "{{ ['é', '日本', '🙂'] }}")
case("out_string_concat", "{{ 'a' ~ 1 ~ none ~ true ~ [1] }} {{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ [0] * 3 }}")
case("out_adjacent_strings", "{{ 'a' 'b' \"c\" }}")
case("out_escapes", "{{ 'tab\\tnl\\nuni\\u00e9 hex\\x41 oct\\101 unknown\\q' }}")
case("out_tuple_expression", "{{ 1, 2 }}")
case("out_int_literals", "{{ 1_000 }} {{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 1e3 }} {{ 2.5e-1 }}")

# ---------------------------------------------------------------- slicing and subscripts
case("slice_strings", "{{ s[1:4] }}|{{ s[-3:] }}|{{ s[::-1] }}|{{ s[::2] }}|{{ s[-1] }}|{{ s[:-2] }}|{{ s[10:] }}|{{ s[1:-1:3] }}",
     s="héllo wörld🙂")
case("slice_lists", "{{ l[1:] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[:0] }} {{ l[5:9] }} {{ l[::-2] }}", l=[1, 2, 3, 4, 5])
case("subscript_dot_int", "{{ l.0 }} {{ l.1.x }} {{ d['k'] }} {{ d.k }}", l=["a", {"x": "y"}], d={"k": "v"})
case("subscript_negative", "{{ l[-1] }} {{ l[-3] }}", l=[1, 2, 3])
case("subscript_missing_prints_empty", "[{{ l[10] }}][{{ d.missing }}][{{ d['missing'] }}][{{ s[99] }}]", l=[1], d={}, s="ab")
case("dict_items_attribute_first", "{{ d.items()|list }} {{ d['items'] }}", d={"items": "the key", "a": 1})

# ---------------------------------------------------------------- comparisons and logic
case("cmp_basic", "{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 }} {{ 2 <= 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 3 > 2 > 1 }} {{ 1 < 3 < 2 }}")
case("cmp_bool_int", "{{ true == 1 }} {{ false == 0 }} {{ 1 == '1' }} {{ none == none }} {{ x == y }}")
case("in_operator", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' not in 'xyz' }} {{ 'z' in undefined_name }}")
case("logic_values", "{{ 0 or 'x' }} {{ '' and 'y' }} {{ 'a' and 'b' }} {{ none or [] }} {{ not 0 }} {{ not not 'a' }}")
case("cond_expr", "{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}] {{ 1 if 0 else 2 if 1 else 3 }}")
case("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 1 ~ 2 ~ 3 }} {{ 10 - 2 - 3 }} {{ 2 * 3 ~ 4 }} {{ not 1 == 2 }}")
case("filter_binds_tight", "{{ -1|abs }} {{ 'a' ~ 'b'|upper }} {{ ('a' ~ 'b')|upper }} {{ 1 ~ 2|string }}")
case("err_concat_binds_tighter_than_plus", "{{ 1 ~ 2 + 3 }}")
case("err_filter_before_plus", "{{ 1 + 2|string }}")

# ---------------------------------------------------------------- for loops
case("loop_vars", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }};{% endfor %}")
case("loop_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}")
case("loop_cycle", "{% for x in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}")
case("loop_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}[{{ x }}]{% endif %}{% endfor %}")
case("joiner", "{% set comma = joiner(', ') %}{% for x in ['a', 'b', 'c'] %}{{ comma() }}{{ x }}{% endfor %} {% set j = joiner() %}{{ j() }}{{ j() }}")
case("loop_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}")
case("loop_filter", "{% for x in range(10) if x % 3 == 0 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}")
case("loop_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", d={"z": 1, "a": [2], "m": None})
case("loop_unpack_paren", "{% for (a, b) in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}")
case("loop_over_dict_and_string", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héy' %}{{ c }}.{% endfor %}", d={"b": 1, "a": 2})
case("loop_over_undefined", "[{% for x in nothing %}{{ x }}{% endfor %}]")
case("loop_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}")
case("loop_else_after_break", "{% for i in [1, 2] %}{% break %}{% else %}E{% endfor %}|{% for i in [1, 2] %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% else %}E{% endfor %}|{% for i in [1, 2] %}{% continue %}{% else %}E{% endfor %}")
case("loop_break_in_set_and_filter_blocks", "{% for i in [1, 2, 3] %}{% set y %}{{ i }}{% if i == 2 %}{% break %}{% endif %}{% endset %}[{{ y }}]{% filter upper %}a{% if i == 1 %}{% continue %}{% endif %}b{% endfilter %}{% endfor %}")
case("err_break_outside_loop", "{% if true %}{% break %}{% endif %}")
case("err_break_in_macro_in_loop", "{% for i in [1] %}{% macro f() %}{% break %}{% endmacro %}{% endfor %}")
case("err_continue_in_generation_in_loop", "{% for i in [1] %}{% generation %}{% continue %}{% endgeneration %}{% endfor %}")
case("err_break_in_for_else", "{% for i in [] %}{% else %}{% break %}{% endfor %}")
case("frame_starts_undefined", "{% for i in [1] %}[{{ x }}]{% endfor %}{% set x = 'set' %}[{{ x }}]", x="context")
case("frame_starts_undefined_in_loop", "{% for m in [1, 2] %}{% for j in [0] %}({{ y }}){% endfor %}{% set y = m %}{{ y }}{% endfor %}", y="ctx")
case("frame_read_before_set_in_same_frame", "{% for m in [1, 2] %}({{ y }}){% set y = m %}{{ y }}{% endfor %}[{{ y }}]", y="ctx")
case("frame_if_branch_store_keeps_context", "{% for m in [1] %}{% for j in [0] %}({{ y }}){% endfor %}{% if false %}{% set y = m %}{% endif %}{% endfor %}", y="ctx")
case("frame_macro_before_set", "{% macro f() %}<{{ z }}>{% endmacro %}{{ f() }}{% set z = 1 %}{{ f() }}", z="ctx")
case("loop_scope", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{{ x }};{% endfor %}{{ x }}")
case("loop_scope_if", "{% for i in range(3) %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}")
case("loop_nested_loop_var", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}")
case("loop_reverse_slice", "{% for m in msgs[::-1] %}{{ m }}{% endfor %}", msgs=[1, 2, 3])
case("loop_range_variants", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }}")
case("loop_after_outer_scope", "{% for x in [1] %}{% set inner = 1 %}{% endfor %}[{{ inner }}][{{ x }}]")

# ---------------------------------------------------------------- set, namespace, macros
case("set_plain_tuple", "{% set a = 1 %}{% set b, c = 2, 'x' %}{% set d = [a, b] %}{{ a }}{{ b }}{{ c }}{{ d }}")
case("set_block", "{% set x %}hello {{ 'world' }}{% endset %}[{{ x }}]{{ x|length }}")
case("set_block_filter", "{% set x | upper %}shout{% endset %}{{ x }}")
case("namespace_counter", "{% set ns = namespace(count=0, found=false) %}{% for i in range(4) %}{% set ns.count = ns.count + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}")
case("namespace_empty_then_assign", "{% set ns = namespace() %}{% set ns.x = 'v' %}{{ ns.x }}[{{ ns.missing }}]")
case("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}")
case("dict_global", "{{ dict(a=1, b='x') }} {{ dict([('k', 'v')]) }} {{ dict() }}")
case("macro_basic", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}")
case("macro_missing_arg", "{% macro f(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ f(1) }}")
case("macro_sees_outer", "{% macro f() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ f() }}")
case("macro_default_uses_param", "{% macro f(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ f(3) }}")
case("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}")
case("macro_render_json_schema", """{%- macro render(schema, indent) -%}
{%- for k, v in schema.items() -%}
{{ indent }}{{ k }}: {% if v is mapping %}
{{ render(v, indent ~ '  ') }}{% else %}{{ v }}
{% endif %}
{%- endfor -%}
{%- endmacro -%}
{{ render(s, '') }}""", s={"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}})
case("block_scopes", "{% set ns = namespace(n=0) %}{% generation %}{% set g = 1 %}{% set ns.n = 5 %}{% endgeneration %}{% filter upper %}{% set f = 1 %}x{% endfilter %}[{{ g }}][{{ f }}][{{ ns.n }}]")
case("generation_minus", "a\n  {%- generation -%}\n  body\n  {%- endgeneration -%}\n  b")
case("call_block", "{% macro m(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call m('b') %}x{{ 1 + 1 }}{% endcall %}")
case("call_block_params", "{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }};{% endfor %}{% endmacro %}{% call(item, n) each(['a', 'b']) %}{{ n }}={{ item }}{% endcall %}")
case("filter_block", "{% filter upper %}hello {{ 'there' }}{% endfilter %}")
case("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}",
     messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])

# ---------------------------------------------------------------- filters
case("f_tojson_default", "{{ d|tojson }}", d={"b": [1, 2.5, None, True], "a": "é\"\n<>&'", "c": {}})
case("f_tojson_indent", "{{ d|tojson(indent=2) }}\n{{ [] |tojson(indent=2) }}\n{{ [1, [2, {}]]|tojson(indent=4) }}", d={"z": 1, "y": {"x": [1, {"w": None}]}})
case("f_tojson_sort_keys", "{{ d|tojson(sort_keys=true) }}", d={"b": 1, "a": {"d": 1, "c": 2}, "B": 0})
case("f_tojson_separators", "{{ d|tojson(separators=(',', ':')) }} {{ d|tojson(indent=1, separators=(', ', ' = ')) }}", d={"a": [1, 2], "b": "x"})
case("f_tojson_ensure_ascii", "{{ s|tojson(ensure_ascii=true) }} {{ s|tojson }} {{ s|tojson(true) }}", s="é日🙂\u0001\x7f")
case("f_tojson_floats", "{{ [1.0, 0.1, 1e100, -2.5e-7, 3]|tojson }}")
case("f_tojson_string_indent", "{{ {'a': [1]}|tojson(indent='\\t') }}")
case("f_tojson_tuple_and_nested", "{{ (1, 'a')|tojson }} {{ {'k': (none, false)}|tojson }}")
case("f_trim", "[{{ '  a b \\n'|trim }}][{{ 'xxaxx'|trim('x') }}][{{ none|trim }}][{{ nothing|trim }}]")
case("f_length", "{{ 'héllo'|length }} {{ [1, 2]|length }} {{ {'a': 1}|length }} {{ nothing|length }} {{ 'ab'|count }}")
case("f_default", "{{ nothing|default('dflt') }} {{ ''|default('dflt') }} {{ ''|default('dflt', true) }} {{ none|default('x') }} {{ none|d('x', boolean=true) }} {{ 0|d(5, true) }}")
case("f_first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} [{{ []|first }}] {{ {'a': 1, 'b': 2}|first }}")
case("f_join", "{{ [1, 'a', none]|join(', ') }} {{ 'abc'|join('-') }} {{ [{'n': 'x'}, {'n': 'y'}]|join('+', attribute='n') }} {{ []|join(',') }}")
case("f_list", "{{ 'abc'|list }} {{ {'a': 1, 'b': 2}|list }} {{ (1, 2)|list }} {{ nothing|list }}")
case("f_map_attribute", "{{ people|map(attribute='name')|join(',') }} {{ people|map(attribute='age', default=0)|list }} {{ people|map(attribute='name')|map('upper')|list }}",
     people=[{"name": "ann", "age": 3}, {"name": "bob"}])
case("f_map_filter", "{{ ['a', 'b']|map('upper')|list }} {{ ['1', '2']|map('int')|sum }} {{ [' a ']|map('trim')|first }}")
case("f_selectattr", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|rejectattr('role', 'eq', 'user')|list|length }} {{ msgs|selectattr('tool')|list }}",
     msgs=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool": True}, {"role": "user", "content": "c"}])
case("f_select_tests", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ [1, 5, 9]|select('gt', 4)|list }} {{ ['a', 'b']|select('in', ['a'])|list }}")
case("f_selectattr_defined", "{{ msgs|selectattr('tool_calls', 'defined')|list|length }} {{ msgs|selectattr('x.y', 'equalto', 1)|list }}",
     msgs=[{"tool_calls": [], "x": {"y": 2}}, {"x": {"y": 1}}])
case("f_items_dictsort", "{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {% for k, v in d|items %}{{ k }}{% endfor %}", d={"b": 2, "A": 3, "c": 1})
case("f_case", "{{ 'hello WORLD'|capitalize }} {{ 'hello world-foo (bar) x_y'|title }} {{ 'ÉCOLE'|lower }} {{ 'straße'|upper }} {{ 'aBc'|upper }}")
case("f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 123|replace('2', 'x') }}")
case("f_string_int_float", "{{ 1|string }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ true|int }}")
case("f_abs_round", "{{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ -0.5|round }}")
case("f_unique_sort_reverse", "{{ [3, 1, 2, 1]|unique|list }} {{ ['b', 'A', 'a']|unique|list }} {{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ people|sort(attribute='n')|map(attribute='n')|list }}",
     people=[{"n": 2}, {"n": 1}])
case("f_sum_min_max", "{{ [1, 2, 3]|sum }} {{ [1.5, 2]|sum }} {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|max }} {{ [{'v': 2}, {'v': 5}]|sum(attribute='v') }}")
case("f_safe_escape", "{{ '<b>'|safe }} {{ '<a href=\"x\">&\\'</a>'|e }} {{ '<x>'|escape }}")
case("f_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}")
case("f_format_percent", "{{ '%s-%d'|format('a', 3) }} {{ 'x=%s' % 5 }} {{ '%s and %s' % ('a', 'b') }} {{ '%05.2f|%-4s|%r' % (3.14159, 'ab', 'q') }}")
case("f_wordcount_center", "{{ 'a b  c'|wordcount }} [{{ 'ab'|center(6) }}] [{{ 'abc'|center(6) }}]")
case("f_batch", "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }}")
case("f_attr", "{{ d|attr('k') }}", d={"k": "v"})

# ---------------------------------------------------------------- tests
case("t_types", "{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }} {{ 'a' is string }} {{ none is none }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is iterable }} {{ nothing is iterable }}")
case("t_defined", "{{ x is defined }} {{ nothing is defined }} {{ nothing is undefined }} {{ d.k is defined }} {{ d.missing is defined }} {{ d['missing'] is not defined }}", x=1, d={"k": None})
case("t_true_false", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ none is false }}")
case("t_numbers", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 5 is eq 5 }} {{ 5 is equalto(6) }} {{ 5 is ne 6 }} {{ 3 is lt 4 }} {{ 3 is ge 3 }} {{ 3 is gt 4 }} {{ 2 is le 1 }} {{ 2 is eq(2) }}")
case("t_in_sameas", "{{ 'a' is in ['a'] }} {{ 3 is in [1] }} {{ none is sameas none }} {{ false is sameas false }} {{ 1 is sameas true }}")
case("t_case_callable", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'Abc' is lower }} {{ range is callable }} {{ 'x' is callable }} {{ f is callable }}", f=1)
case("t_not", "{{ x is not none }} {{ x is not string }} {{ not x is none }}", x="s")

# ---------------------------------------------------------------- methods
case("m_str", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}", s="  Hi There \n")
case("m_str_split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a-b-c'.rsplit('-', 1) }} {{ 'l1\\nl2\\r\\nl3'.splitlines() }}")
case("m_str_search", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.index('e') }} {{ 'hello'.count('l') }}")
case("m_str_replace_join_format", "{{ 'a.b.c'.replace('.', '/') }} {{ 'a.b.c'.replace('.', '', 1) }} {{ ', '.join(['x', 'y']) }} {{ '{} + {} = {sum}'.format(1, 2, sum=3) }} {{ '{0}{1}{0}'.format('a', 'b') }}")
case("m_str_predicates", "{{ '123'.isdigit() }} {{ 'a1'.isdigit() }} {{ ' \\t'.isspace() }} {{ 'abc'.isalpha() }} {{ 'ab1'.isalnum() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'prefix_x'.removeprefix('prefix_') }}")
case("m_str_pad_partition", "[{{ 'ab'.center(7, '*') }}][{{ 'ab'.ljust(4) }}][{{ 'ab'.rjust(4, '.') }}][{{ '-42'.zfill(6) }}][{{ 'é'.center(4) }}] {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }} {{ 'ÉA'.casefold() }}")
case("m_str_splitlines_all", "{{ 'a\\x0bb\\x0cc\\u2028d\\r\\ne\\n'.splitlines() }} {{ 'x\\ny\\r\\n'.splitlines(true) }} {{ ''.splitlines() }}")
case("m_dict", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }}", d={"a": 1, "b": [2]})
case("m_list", "{{ l.index(2) }} {{ l.count(1) }}", l=[1, 2, 1])
case("m_split_think", "{% set c = content.split('</think>')[-1].lstrip('\\n') %}{% set r = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ r }}][{{ c }}]",
     content="<think>\nreasoning here\n</think>\n\nThe answer.")

# ---------------------------------------------------------------- lenient undefined and errors
case("undef_prints_empty", "[{{ nothing }}][{{ nothing ~ 'x' }}][{{ nothing|upper }}][{% if nothing %}t{% else %}f{% endif %}][{{ nothing == nothing }}][{{ not nothing }}]")
case("undef_attr_raises", "{{ nothing.attr }}")
case("undef_item_raises", "{{ nothing['k'] }}")
case("undef_missing_key_then_attr", "{{ d.a.b }}", d={})
case("undef_arith_raises", "{{ nothing + 1 }}")
case("undef_call_raises", "{{ nothing() }}")
case("undef_list_element_message", "{{ l[5].x }}", l=[1])
case("undef_none_attribute", "{{ n.x }}[{{ (n.x) is defined }}]", n=None)
case("undef_none_attr_of_attr", "{{ n.x.y }}", n=None)
case("undef_compare_raises", "{{ nothing < 1 }}")
case("undef_tojson_raises", "{{ nothing|tojson }}")
case("undef_first_of_empty_attr", "{{ ([]|first).x }}")
case("err_raise_exception", "{% if messages|length == 0 %}{{ raise_exception('No messages: ' ~ 0) }}{% endif %}")
case("err_raise_exception_nonstring", "{{ raise_exception(42) }}")
case("err_type_concat", "{{ 'a' + 1 }}")
case("err_type_int_plus_str", "{{ 1 + 'a' }}")
case("err_compare_types", "{{ 'a' < 1 }}")
case("err_not_iterable", "{% for x in 5 %}{% endfor %}")
case("err_none_not_iterable", "{% for x in n %}{% endfor %}", n=None)
case("err_in_string_left_int", "{{ 1 in 'abc' }}")
case("err_division_by_zero", "{{ 1 / 0 }}")
case("err_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}")
case("err_namespace_non_namespace", "{% set d = {} %}{% set d.x = 1 %}")
case("err_length_of_generator", "{{ [1]|map('string')|length }}")
case("err_not_callable", "{{ 'abc'() }}")
case("err_macro_too_many_args", "{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}")
case("err_syntax_unclosed_if", "{% if true %}x")
case("err_syntax_bad_expression", "{{ 1 + }}")
case("err_syntax_unknown_tag", "{% include 'x' %}")
case("err_syntax_unknown_filter", "{{ x|nosuchfilter }}")
case("err_list_append_unsafe", "{% set l = [] %}{{ l.append(1) }}")
case("err_str_format_missing", "{{ '{} {}'.format(1) }}")
case("generator_is_truthy", "{% if [1]|select('gt', 5) %}truthy{% else %}falsy{% endif %} {{ ([]|map('upper')|list) is sequence }}")

# Found by comparing random expressions with jinja2 (an ad-hoc harness, not kept): Python's own messages.
case("py_map_select_skip_false", "[{{ false|map('upper')|list }}][{{ 0|select|list }}][{{ none|selectattr('x')|list }}][{{ ''|map(attribute='a')|join }}]")
case("py_compare_operand_order", "{{ 'a' > 1 }}")
case("py_compare_operand_order_le", "{{ [1] <= 'a' }}")
case("py_max_compare", "{{ [{'a': 1}, {'a': 2}]|max }}")
case("py_min_compare", "{{ [{'a': 1}, {'a': 2}]|min }}")
case("py_division_messages_float", "{{ 1.5 / 0 }}")
case("py_division_messages_mod", "{{ 1 % 0 }}")
case("py_division_messages_floordiv_float", "{{ 2.5 // 0 }}")
case("py_multiply_sequence", "{{ [1] * 'a' }}")
case("py_multiply_sequence_float", "{{ 1.5 * 'a' }}")
case("py_pow_types", "{{ none ** 2 }}")
case("py_concat_tuple", "{{ (1,) + [2] }}")
case("py_indent_list", "{{ [1]|indent }}")
case("py_indent_float", "{{ 1.5|indent }}")
case("py_indent_undefined", "{{ nothing|indent }}")
case("py_int_float_undefined", "{{ nothing|int }}")
case("py_last_not_reversible", "{{ 5|last }}")
case("py_reverse_not_iterable", "{{ 5|reverse }}")
case("py_dictsort_not_dict", "{{ [1]|dictsort }}")
case("py_round_abs_undefined", "{{ nothing|round }}")
case("py_abs_undefined", "{{ nothing|abs }}")
case("py_unhashable_in_dict", "{{ [1] in {'a': 1} }}")
case("py_slice_none", "{{ n[1:] }}", n=None)
case("py_slice_dict", "{{ d[1:] }}", d={"a": 1})
case("py_slice_undefined", "{{ nothing[1:] }}")
case("py_str_method_arg_types", "{{ 'abc'.find(1) }}")
case("py_str_join_item_types", "{{ ', '.join(['a', 1]) }}")
case("py_percent_width_precision", "[{{ '%5s|%-5s|%.2s|%5.1s|%r' % ('ab', 'ab', 'abc', 'xyz', 'q') }}]")
case("py_values", "{{ 'x' % [] }} {{ 'x' % {} }} {{ 'a b.c_d é1'|wordcount }} {{ 0.1|wordcount }} {{ nothing is callable }} {{ range is callable }}")

# ---------------------------------------------------------------- context as render_jinja_template builds it
case("ctx_tools_none_defined", "{{ tools is defined }} {{ tools is none }} {{ documents is none }} {{ add_generation_prompt }}")
case("ctx_reasoning_alias", "{% for m in messages %}{{ m.thinking }}|{{ m.reasoning_content }}|{{ m|tojson }}\n{% endfor %}",
     messages=[{"role": "assistant", "content": "x", "reasoning": "r1"},
               {"role": "assistant", "reasoning_content": "r2", "content": "y"},
               {"role": "assistant", "content": "z", "thinking": "r3"}, {"role": "user", "content": "u"}])
case("ctx_extra_kwargs", "{{ enable_thinking }} {{ custom|tojson }} {{ bos_token }}", enable_thinking=False, custom={"k": [1]}, bos_token="<s>")
case("ctx_strftime_now", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M %A %j') }}")

# ---------------------------------------------------------------- real-world templates
USER = {"role": "user", "content": "What's the weather in Paris?"}
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris or 東京"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}]
TOOLS_RICH = [{"type": "function", "function": {
    "name": "search", "description": "  Search the web.\n",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "What to look for", "minLength": 1},
        "limit": {"type": "integer", "description": "How many results", "default": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Filters"},
        "opts": {"type": "object", "additionalProperties": {"type": "number"}, "description": "Weights"},
        "mode": {"type": ["string", "integer"], "description": "Mode", "enum": ["fast", None]}},
        "required": ["query"]},
    "return": {"type": "array", "description": "The hits"}}}] + TOOLS
# A "null" type sends the Hermes template's json_to_python_type into endless recursion (jinja2:
# RecursionError), as it would for a user.
TOOLS_NULL = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {
    "type": "object", "properties": {"x": {"type": ["string", "null"], "description": "x"}}}}}]
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
CALL_STR = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
ANSWER = {"role": "assistant", "content": "It is 21°C and clear in Paris."}
THINK_ANSWER = {"role": "assistant", "content": "<think>\nThe user asks about Paris.\n</think>\n\nIt is sunny."}
REASONED = {"role": "assistant", "content": "Sunny.", "reasoning_content": "Check the forecast."}

CONVERSATIONS = {
    "simple": [USER],
    "system": [SYSTEM, USER],
    "multi": [SYSTEM, USER, ANSWER, {"role": "user", "content": "And tomorrow?"}],
    "tool_round": [SYSTEM, USER, CALL, TOOL_RESULT, ANSWER],
    "tool_pending": [USER, CALL, TOOL_RESULT],
    "tool_round_str": [SYSTEM, USER, CALL_STR, TOOL_RESULT, ANSWER],
    "think": [USER, THINK_ANSWER, {"role": "user", "content": "Thanks"}],
    "think_last": [USER, THINK_ANSWER],
    "reasoned": [USER, REASONED],
    "bad_alternation": [USER, USER],
    "multimodal": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  Describe this. "}]},
                   {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
                   {"role": "user", "content": [{"type": "text", "text": "Color?"}]}],
    "none_content": [USER, {"role": "assistant", "content": None}],
    "empty": [],
    "override": [{"role": "system", "content": "Plain instructions /system_override  "}, USER],
}

REAL = {
    "qwen3": [("simple", {}), ("system", {}), ("multi", {}), ("tool_round", {"tools": TOOLS}),
              ("tool_pending", {"tools": TOOLS}), ("think", {}), ("think_last", {}), ("reasoned", {}),
              ("simple", {"enable_thinking": False}), ("multi", {"enable_thinking": True}), ("multimodal", {}),
              ("none_content", {})],
    "llama-3.1": [("simple", {}), ("system", {}), ("multi", {}), ("tool_round", {"tools": TOOLS}),
                  ("tool_pending", {"tools": TOOLS, "tools_in_user_message": False}),
                  ("system", {"builtin_tools": ["brave_search", "code_interpreter"], "date_string": "15 Jun 2025"}),
                  ("empty", {"tools": TOOLS}), ("none_content", {})],
    "gemma-3": [("simple", {}), ("system", {}), ("multi", {}), ("bad_alternation", {}), ("multimodal", {}),
                ("none_content", {}), ("empty", {})],
    "gemma-2": [("simple", {}), ("multi", {}), ("system", {})],
    "deepseek-r1": [("simple", {}), ("system", {}), ("think", {}), ("tool_round_str", {}), ("tool_round", {})],
    "olmo-2": [("simple", {}), ("system", {}), ("multi", {})],
    "mistral-v3-tools": [("simple", {}), ("multi", {}), ("tool_round", {"tools": TOOLS}), ("bad_alternation", {}),
                         ("tool_pending", {"tools": TOOLS})],
    "hermes-tools": [("tool_round", {"tools": TOOLS_RICH}), ("tool_round_str", {"tools": TOOLS_RICH}),
                     ("simple", {"tools": []}), ("simple", {"tools": TOOLS_NULL})],
    "qwen3-coder-style": [("simple", {}), ("system", {"tools": TOOLS_RICH}), ("tool_round", {"tools": TOOLS_RICH}),
                          ("tool_pending", {})],
    "smollm3-style": [("simple", {}), ("system", {"enable_thinking": False}), ("think", {}),
                      ("simple", {"tools": TOOLS}), ("system", {"python_tools": [{"name": "f", "doc": "x"}]}),
                      ("override", {})],
}
SPECIAL = {"qwen3": ("", "<|im_end|>"), "llama-3.1": ("<|begin_of_text|>", "<|eot_id|>"),
           "gemma-3": ("<bos>", "<eos>"), "gemma-2": ("<bos>", "<eos>"),
           "deepseek-r1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
           "olmo-2": ("<|endoftext|>", "<|endoftext|>"), "mistral-v3-tools": ("<s>", "</s>"),
           "hermes-tools": ("<|begin_of_text|>", "<|im_end|>"), "qwen3-coder-style": ("", "<|im_end|>"),
           "smollm3-style": ("", "<|im_end|>")}

for name, runs in REAL.items():
    with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
        text = f.read()
    bos, eos = SPECIAL[name]
    for conv, extra in runs:
        for agp in (False, True):
            context = {"messages": CONVERSATIONS[conv], "add_generation_prompt": agp, "bos_token": bos, "eos_token": eos}
            context.update(extra)
            tag = "_".join(f"{k}" for k in extra) or "plain"
            label = f"real_{name}_{conv}_{tag}_{'gen' if agp else 'nogen'}"
            while label in {c[0] for c in CASES}:
                label += "_again"
            case(label, text, **context)


def render(template, context):
    context = dict(context)
    messages = context.pop("messages", [])
    tools = context.pop("tools", None)
    documents = context.pop("documents", None)
    agp = context.pop("add_generation_prompt", False)
    try:
        rendered, _ = chat_template_utils.render_jinja_template(
            conversations=[messages], chat_template=template, tools=tools, documents=documents,
            add_generation_prompt=agp, **context)
        return {"ok": True, "output": rendered[0]}
    except Exception as e:  # the exception is the expected result
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main():
    out = {"transformers_version": transformers.__version__, "jinja2_version": jinja2.__version__,
           "python": sys.version.split()[0], "strftime_now_frozen_to": "2025-06-15T12:00:00", "cases": []}
    names = set()
    for name, template, context in CASES:
        assert name not in names, name
        names.add(name)
        out["cases"].append({"name": name, "template": template, "context": context, **render(template, context)})
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for c in out["cases"] if not c["ok"])
    print(f"{OUT}: {len(out['cases'])} cases ({errors} raise)")


if __name__ == "__main__":
    main()
